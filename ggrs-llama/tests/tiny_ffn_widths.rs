//! Feed-forward widths per layer (`feed_forward_length` as an array, llama.cpp's
//! `n_ff(il)`), as Gemma 4 E2B/E4B give their shared-cache layers a double-wide MLP: on
//! `shared/reference/tiny/tiny-gemma4-f16.gguf` rewritten here with layers 2 and 3 (the ones
//! reading earlier layers' caches) twice as wide (192 against 96), new seeded gate, up and
//! down matrices. The reference `data/tiny-gemma4-wide-f16.llama.jsonl` is llama.cpp
//! 0c1e570's output on the file this test writes (AVX2 build, 2 threads):
//!
//! ```text
//! GGRS_TINY_GEMMA4_WIDE=/tmp/tiny-gemma4-wide-f16.gguf \
//!     cargo test --workspace --test integration -- --ignored write_tiny_gemma4_wide
//! dump-logits /tmp/tiny-gemma4-wide-f16.gguf IDS 16 > ggrs-llama/tests/data/tiny-gemma4-wide-f16.llama.jsonl
//! ```
//!
//! with `dump-logits` built from `scripts/llamacpp-dump-logits.cpp` and IDS the `tokens` of
//! `tiny-gemma4-f16.public.jsonl`, a line each.

use std::path::Path;
use std::sync::Arc;

use ggrs_core::gguf::Value as GV;
use ggrs_core::DType;
use ggrs_llama::Model;

use crate::common::{self, NewTensor};
use crate::tiny_gemma4_moe::{assert_matches_reference_and_not_the_dense_one, Rng};

/// Each layer's feed-forward width: the tiny model's 96, doubled in the shared-cache layers.
const WIDTHS: [usize; 4] = [96, 96, 192, 192];

/// Writes the tiny Gemma 4 with per-layer widths to `out`.
fn write_model(out: &Path) {
    let src = common::reference_dir().join("tiny/tiny-gemma4-f16.gguf");
    let e = 64;
    let mut rng = Rng(20261130);
    let wide: Vec<usize> = (0..WIDTHS.len()).filter(|&i| WIDTHS[i] != 96).collect();
    let mut add = Vec::new();
    for &il in &wide {
        let f = WIDTHS[il];
        for (name, ne) in [
            ("ffn_gate", vec![e, f]),
            ("ffn_up", vec![e, f]),
            ("ffn_down", vec![f, e]),
        ] {
            add.push(NewTensor {
                name: format!("blk.{il}.{name}.weight"),
                dtype: DType::F16,
                bytes: rng.f16s(e * f, 0.3),
                ne,
            });
        }
    }
    let is_replaced = |name: &str| {
        wide.iter().any(|il| {
            ["ffn_gate", "ffn_up", "ffn_down"]
                .iter()
                .any(|t| name == format!("blk.{il}.{t}.weight"))
        })
    };
    let widths = GV::Array(WIDTHS.iter().map(|&f| GV::U32(f as u32)).collect());
    common::rewrite_gguf_with(
        &src,
        out,
        |k, v| match k {
            "gemma4.feed_forward_length" => Some(widths.clone()),
            _ => Some(v.clone()),
        },
        |name, ne| (!is_replaced(name)).then(|| ne.to_vec()),
        Vec::new(),
        add,
    );
}

fn model() -> Arc<Model> {
    let path = common::ScratchFile::new("gemma4-wide", "tiny.gguf");
    write_model(&path);
    Arc::new(Model::load(&*path).expect("load the tiny Gemma 4 with per-layer widths"))
}

/// The widths as read, then prompt logits within 0.02 of llama.cpp's AVX2 build and every
/// argmax and greedy run equal, on 1 and 2 threads (the tolerance of `tiny_gemma4_moe`:
/// ggrs follows the AVX-512 build's summation orders).
#[test]
fn gemma4_per_layer_ffn_widths_match_llama_cpp() {
    let m = model();
    assert_eq!(m.hparams.n_ff_layers, WIDTHS);
    assert_eq!(m.hparams.n_ff, 192);
    assert_matches_reference_and_not_the_dense_one(&m, "tiny-gemma4-wide-f16.llama.jsonl");
}

/// A width array of the wrong length is an error naming the key.
#[test]
fn a_width_array_of_the_wrong_length_is_refused() {
    let src = common::reference_dir().join("tiny/tiny-gemma4-f16.gguf");
    let out = common::ScratchFile::new("gemma4-wide", "short.gguf");
    let three = GV::Array(vec![GV::U32(96); 3]);
    common::rewrite_gguf(
        &src,
        &out,
        |k, v| match k {
            "gemma4.feed_forward_length" => Some(three.clone()),
            _ => Some(v.clone()),
        },
        |_, ne| Some(ne.to_vec()),
    );
    let err = Model::load(&*out).expect_err("three widths for four layers");
    let msg = err.to_string();
    assert!(msg.contains("feed_forward_length"), "{msg}");
}

/// Writes the model to `$GGRS_TINY_GEMMA4_WIDE`, for making the reference (see the module
/// docs).
#[test]
#[ignore = "writes the tiny model for llama.cpp's reference run"]
fn write_tiny_gemma4_wide() {
    let out = std::env::var_os("GGRS_TINY_GEMMA4_WIDE").expect("GGRS_TINY_GEMMA4_WIDE=path");
    write_model(Path::new(&out));
}
