// The linker script applies only to the bare-metal kernel binary; a host build
// of this crate fails in rustc instead of with a confusing link error.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = std::path::Path::new(&dir).join("../linker.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-none") {
        println!("cargo:rustc-link-arg-bins=-T{}", script.display());
        // Keep consecutive PT_LOAD offsets congruent (the a.out kludge needs a linear file).
        println!("cargo:rustc-link-arg-bins=-zmax-page-size=0x1000");
        // Non-PIE even if RUSTFLAGS replaces relocation-model=static: the boot asm uses 32-bit absolutes.
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
