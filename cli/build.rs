//! Records whether this crate is built from a kubeapp checkout, for `kubeapp init`'s default
//! `kubeapp` dependency (see `src/init.rs`).
//!
//! A crate built from its published package (`cargo install kubeapp-cli`, or `cargo package`'s
//! verify build) has the `Cargo.toml.orig` cargo writes into every package beside the
//! normalized manifest; a checkout never has it. Only a checkout build sets
//! `KUBEAPP_CLI_CHECKOUT` (the checkout's root, this crate's parent); `init` then depends on it
//! by path, and a packaged build makes projects depend on the published version instead.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let Some(manifest_dir) = std::env::var_os("CARGO_MANIFEST_DIR") else {
        return;
    };
    let manifest_dir = std::path::PathBuf::from(manifest_dir);
    if manifest_dir.join("Cargo.toml.orig").exists() {
        return;
    }
    if let Some(root) = manifest_dir.parent() {
        println!("cargo::rustc-env=KUBEAPP_CLI_CHECKOUT={}", root.display());
    }
}
