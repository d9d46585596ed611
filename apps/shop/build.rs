//! Link the two Lambda `bootstrap`s `-no-pie`, as the root package does
//! (see its `build.rs`: 1 MB of dynamic relocations less each).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        for bin in ["shop-stream", "shop-schedule"] {
            println!("cargo:rustc-link-arg-bin={bin}=-no-pie");
        }
    }
}
