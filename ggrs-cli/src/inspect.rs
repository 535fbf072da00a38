//! `ggrs inspect FILE`: metadata and tensor table of a GGUF file.

use std::path::PathBuf;

use ggrs_core::gguf::{GgufFile, Value};

use crate::CliResult;

/// Arguments of `ggrs inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The GGUF file (for a split model, its first part: every part is read and listed).
    file: PathBuf,
    /// Array elements shown before summarising.
    #[arg(long, default_value_t = 8)]
    max_array: usize,
    /// Print metadata only.
    #[arg(long)]
    no_tensors: bool,
}

fn show(v: &Value, max: usize) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => {
            let kind = a.first().map_or("empty", |x| x.type_name());
            let shown: Vec<String> = a.iter().take(max).map(|x| show(x, max)).collect();
            let more = if a.len() > max { ", …" } else { "" };
            format!("[{} × {kind}] [{}{more}]", a.len(), shown.join(", "))
        }
        Value::F32(x) => format!("{x}"),
        Value::F64(x) => format!("{x}"),
        Value::Bool(b) => format!("{b}"),
        other => other
            .as_i64()
            .map(|i| i.to_string())
            .or_else(|| other.as_u64().map(|u| u.to_string()))
            .unwrap_or_else(|| format!("{other:?}")),
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Runs `ggrs inspect`.
pub fn run(a: Args) -> CliResult {
    let f = GgufFile::open(&a.file)?;
    println!(
        "{}: GGUF v{}, {} metadata keys, {} tensors, alignment {}",
        a.file.display(),
        f.version(),
        f.metadata().len(),
        f.tensors().len(),
        f.alignment()
    );
    if !f.parts().is_empty() {
        println!();
        println!("split model, {} parts:", f.parts().len());
        println!(
            "{:<5} {:<9} {:>12} {:>12}  file",
            "part", "tensors", "bytes", "data at"
        );
        for (i, p) in f.parts().iter().enumerate() {
            println!(
                "{:<5} {:<9} {:>12} {:>12}  {}",
                i + 1,
                p.n_tensors,
                p.size,
                p.data_offset,
                p.path.display()
            );
        }
    }
    println!();
    println!("{:<4} {:<44} {:<8} value", "#", "key", "type");
    for (i, (k, v)) in f.metadata().iter().enumerate() {
        println!(
            "{:<4} {:<44} {:<8} {}",
            i + 1,
            k,
            v.type_name(),
            show(v, a.max_array)
        );
    }
    if a.no_tensors {
        return Ok(());
    }
    println!();
    // A split model's table also says where each tensor is: its part and its offset in
    // that part's data section.
    let split = !f.parts().is_empty();
    let extra = if split {
        format!(" {:>12} {:>4}", "offset", "part")
    } else {
        String::new()
    };
    println!(
        "{:<5} {:<36} {:<6} {:<26} {:>12}{extra}",
        "#", "tensor", "type", "shape (ne)", "bytes"
    );
    let mut total = 0u64;
    for (i, t) in f.tensors().iter().enumerate() {
        total += t.size as u64;
        let extra = match f.tensor_part(&t.name) {
            Some((part, offset)) if split => format!(" {offset:>12} {:>4}", part + 1),
            _ => String::new(),
        };
        println!(
            "{:<5} {:<36} {:<6} {:<26} {:>12}{extra}",
            i + 1,
            t.name,
            t.dtype.name(),
            format!("{:?}", t.shape()),
            t.size
        );
    }
    println!();
    let params: usize = f.tensors().iter().map(|t| t.nelements()).sum();
    println!(
        "{} tensors, {} parameters, {} of tensor data",
        f.tensors().len(),
        params,
        human(total)
    );
    Ok(())
}
