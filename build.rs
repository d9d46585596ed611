//! Link the Lambda `bootstrap`s (`stream`, `schedule`) as position-dependent
//! executables (`-no-pie`). A position-independent one carries a dynamic
//! relocation for every pointer in its read-only data (the SDK's vtables
//! above all): 1.06 MB of `.rela.dyn`, an eighth of the stream `bootstrap`,
//! which the loader also has to apply at every cold start. The packed form
//! (`-z pack-relative-relocs`) would need glibc 2.36; Lambda's
//! provided.al2023 has 2.34. Shared libraries, stack, heap and mmap stay
//! randomized; the executable's own code is at a fixed address.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        for bin in ["stream", "schedule"] {
            println!("cargo:rustc-link-arg-bin={bin}=-no-pie");
        }
    }
}
