//! Class-data sharing for DynamoDB Local's JVM: the classes it loads to start,
//! parsed and verified once, then mapped from an archive by every later start.
//! Measured on two cores (`-XX:TieredStopAtLevel=1`, 3 starts each): 1.9 CPU
//! seconds and 1.5 s until it answers without the archive, 1.0 to 1.1 CPU
//! seconds and 0.8 s with it. A test run starts dozens of instances.
//!
//! The JVM archives classes only from a class path of jar files, and
//! `DynamoDBLocal.jar`'s manifest puts `.` (its own folder, which is not
//! empty) on the class path. So the installation gets a copy of the jar
//! without the manifest's `Class-Path` (`cds/DynamoDBLocal.jar`, its other
//! entries copied byte for byte), and the JVM is started with `-cp`: that copy,
//! then the jar files the attribute named, in its order. (`.` held no class,
//! and the `log4j2.xml` it names does not exist beside the jar.)
//!
//! The archive (`cds/jdk-<hash of java -version>.jsa`) is written by the first start that
//! finds none, alone (a lock), with `-XX:ArchiveClassesAtExit`: that instance
//! is stopped once it answers, and the JVM writes the archive as it exits. A
//! start without the archive (another process is writing it, or it could not
//! be written) runs as before; a JVM that cannot use an archive ignores it
//! (`-Xshare:auto`, the default).

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// How to start DynamoDB Local with its classes shared (see the module's
/// docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSharing {
    /// `-cp`: the jar without its manifest's class path, then the jar files
    /// that class path named.
    pub class_path: OsString,
    /// The class `java` runs (the manifest's `Main-Class`).
    pub main_class: String,
    /// The archive: present once a start has written it.
    pub archive: PathBuf,
}

/// The manifest's folded lines as `(name, value)` attributes, in order.
fn attributes(manifest: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in manifest.lines() {
        if let Some(rest) = line.strip_prefix(' ') {
            if let Some((_, value)) = out.last_mut() {
                value.push_str(rest);
            }
        } else if let Some((name, value)) = line.split_once(':') {
            out.push((name.to_owned(), value.trim_start().to_owned()));
        }
    }
    out
}

/// The manifest without its `Class-Path` attribute (and its continuation
/// lines), every other line as it was.
fn without_class_path(manifest: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in manifest.split_inclusive('\n') {
        if line.starts_with(' ') {
            if !skipping {
                out.push_str(line);
            }
            continue;
        }
        skipping = line
            .get(..11)
            .is_some_and(|n| n.eq_ignore_ascii_case("Class-Path:"));
        if !skipping {
            out.push_str(line);
        }
    }
    out
}

/// The file name of an archive for this Java, from its `java -version`
/// output: a Java updated in place writes an archive of its own (the JVM
/// would ignore one another build wrote).
fn archive_name(java_version: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(java_version.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("jdk-{hex}.jsa")
}

const MANIFEST: &str = "META-INF/MANIFEST.MF";

/// The text of `jar`'s manifest.
fn read_manifest(jar: &Path) -> io::Result<String> {
    let mut archive = zip::ZipArchive::new(File::open(jar)?).map_err(io::Error::other)?;
    let mut manifest = String::new();
    archive
        .by_name(MANIFEST)
        .map_err(io::Error::other)?
        .read_to_string(&mut manifest)?;
    Ok(manifest)
}

/// Copy `jar` to `out` with `manifest` (its own, read before) without its
/// `Class-Path`; every other entry is copied as it is.
fn write_copy(jar: &Path, manifest: &str, out: &Path) -> io::Result<()> {
    let mut archive = zip::ZipArchive::new(File::open(jar)?).map_err(io::Error::other)?;
    let tmp = out.with_extension(format!("jar.tmp-{}", std::process::id()));
    let mut writer = zip::ZipWriter::new(File::create(&tmp)?);
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).map_err(io::Error::other)?;
        if entry.name().map_err(io::Error::other)? == MANIFEST {
            drop(entry);
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Stored);
            writer
                .start_file(MANIFEST, options)
                .map_err(io::Error::other)?;
            writer.write_all(without_class_path(manifest).as_bytes())?;
        } else {
            writer.raw_copy_file(entry).map_err(io::Error::other)?;
        }
    }
    writer.finish().map_err(io::Error::other)?;
    fs::rename(&tmp, out)
}

/// Prepare `jar` (installed in `install_dir`) for class-data sharing: the
/// copy without its manifest's class path, made once (again when the jar is
/// newer, the archives of the old copy removed: the JVM checks the jars an
/// archive was made from), and the archive's path for this Java. Called
/// under the installation's lock.
pub(super) fn prepare(
    install_dir: &Path,
    jar: &Path,
    java_version: &str,
) -> io::Result<ClassSharing> {
    let manifest = read_manifest(jar)?;
    let attrs = attributes(&manifest);
    let get = |name: &str| {
        attrs
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let main_class = get("Main-Class")
        .ok_or_else(|| io::Error::other(format!("{MANIFEST} names no Main-Class")))?;
    let dir = install_dir.join("cds");
    fs::create_dir_all(&dir)?;
    let copy = dir.join("DynamoDBLocal.jar");
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified());
    let current = matches!((modified(&copy), modified(jar)), (Ok(c), Ok(j)) if c >= j);
    if !current {
        write_copy(jar, &manifest, &copy)?;
        for entry in fs::read_dir(&dir)?.flatten() {
            if entry.path().extension().is_some_and(|e| e == "jsa") {
                fs::remove_file(entry.path())?;
            }
        }
    }
    let jar_dir = jar.parent().unwrap_or(Path::new("."));
    let mut class_path = OsString::from(&copy);
    for entry in get("Class-Path")
        .unwrap_or_default()
        .split_whitespace()
        .filter(|e| e.ends_with(".jar"))
    {
        class_path.push(":");
        class_path.push(jar_dir.join(entry));
    }
    Ok(ClassSharing {
        class_path,
        main_class,
        archive: dir.join(archive_name(java_version)),
    })
}

/// The lock a process holds while it writes the archive, or `None` when
/// another process holds it (that start then runs without the archive).
pub(super) fn try_lock_archive(sharing: &ClassSharing) -> Option<File> {
    let path = sharing.archive.with_extension("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    file.try_lock().ok()?;
    Some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "Manifest-Version: 1.0\r\nMain-Class: a.b.Main\r\nClass-Path: . log4j2.xml lib/one.jar lib/tw\r\n o.jar lib/x.so\r\nBundle-Name: x\r\n  continued\r\n";

    #[test]
    fn attributes_unfold_continuation_lines() {
        let attrs = attributes(MANIFEST);
        assert_eq!(attrs[1], ("Main-Class".into(), "a.b.Main".into()));
        assert_eq!(
            attrs[2],
            (
                "Class-Path".into(),
                ". log4j2.xml lib/one.jar lib/two.jar lib/x.so".into()
            )
        );
        assert_eq!(attrs[3], ("Bundle-Name".into(), "x continued".into()));
    }

    #[test]
    fn only_the_class_path_is_removed() {
        assert_eq!(
            without_class_path(MANIFEST),
            "Manifest-Version: 1.0\r\nMain-Class: a.b.Main\r\nBundle-Name: x\r\n  continued\r\n"
        );
    }

    #[test]
    fn each_java_build_has_its_own_archive() {
        let a = archive_name("openjdk version \"17.0.15\" 2025-04-15\nOpenJDK (build 17.0.15+6)");
        let b = archive_name("openjdk version \"17.0.15\" 2025-04-15\nOpenJDK (build 17.0.15+7)");
        assert_ne!(a, b);
        assert!(
            a.starts_with("jdk-") && a.ends_with(".jsa") && a.len() == 20,
            "{a}"
        );
    }

    #[test]
    fn the_copy_keeps_every_entry_and_drops_the_class_path() {
        let dir = std::env::temp_dir().join(format!("cds-test-{}", std::process::id()));
        let lib = dir.join("dist");
        fs::create_dir_all(&lib).unwrap();
        let jar = lib.join("in.jar");
        let mut w = zip::ZipWriter::new(File::create(&jar).unwrap());
        let deflated = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        w.start_file("META-INF/MANIFEST.MF", deflated).unwrap();
        w.write_all(MANIFEST.as_bytes()).unwrap();
        w.start_file("a/b/Main.class", deflated).unwrap();
        w.write_all(&[0xca, 0xfe, 0xba, 0xbe, 1, 2, 3]).unwrap();
        w.finish().unwrap();

        let sharing = prepare(&dir, &jar, "openjdk version \"17\"").unwrap();
        assert_eq!(sharing.main_class, "a.b.Main");
        let copy = dir.join("cds/DynamoDBLocal.jar");
        let expected = [
            copy.clone(),
            lib.join("lib/one.jar"),
            lib.join("lib/two.jar"),
        ]
        .map(|p| p.display().to_string())
        .join(":");
        assert_eq!(sharing.class_path, OsString::from(expected));
        assert_eq!(
            sharing.archive,
            dir.join("cds").join(archive_name("openjdk version \"17\""))
        );
        let mut out = zip::ZipArchive::new(File::open(&copy).unwrap()).unwrap();
        let mut text = String::new();
        out.by_name("META-INF/MANIFEST.MF")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, without_class_path(MANIFEST));
        let mut class = Vec::new();
        out.by_name("a/b/Main.class")
            .unwrap()
            .read_to_end(&mut class)
            .unwrap();
        assert_eq!(class, [0xca, 0xfe, 0xba, 0xbe, 1, 2, 3]);

        // Made once: a second preparation leaves the copy (and an archive).
        fs::write(&sharing.archive, "archive").unwrap();
        let before = fs::metadata(&copy).unwrap().modified().unwrap();
        prepare(&dir, &jar, "openjdk version \"17\"").unwrap();
        assert_eq!(fs::metadata(&copy).unwrap().modified().unwrap(), before);
        assert!(sharing.archive.exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
