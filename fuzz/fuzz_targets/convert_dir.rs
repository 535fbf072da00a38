//! Fuzzes `convert`'s readers: the fuzz bytes become a checkpoint directory's
//! `config.json` and `model.safetensors` (header length, JSON header, data), converted to
//! GGUF in a scratch directory. Any outcome but a panic or a huge allocation is fine; the
//! input files are never changed.

#![no_main]

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use ggrs_convert::{convert_hf_dir_with, ConvertOptions};
use libfuzzer_sys::fuzz_target;

static DIR: OnceLock<PathBuf> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("ggrs-fuzz-convert-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("scratch directory");
        d
    });
    let parts = common::fields(data, 2);
    let config = parts[0];
    let st = parts.get(1).copied().unwrap_or(&[]);
    std::fs::write(dir.join("config.json"), config).expect("write config.json");
    std::fs::write(dir.join("model.safetensors"), st).expect("write model.safetensors");
    let out = dir.join("out.gguf");
    let _ = convert_hf_dir_with(
        dir,
        &out,
        &ConvertOptions {
            n_threads: 1,
            ..ConvertOptions::default()
        },
        |_| {},
    );
    assert_eq!(std::fs::read(dir.join("config.json")).unwrap(), config);
    assert_eq!(std::fs::read(dir.join("model.safetensors")).unwrap(), st);
});
