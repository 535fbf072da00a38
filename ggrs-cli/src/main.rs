//! `ggrs`: the command line.
fn main() {
    println!("ggrs {}", env!("CARGO_PKG_VERSION"));
}
