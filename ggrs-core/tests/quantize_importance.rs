//! `quantize_file` with importance weights: each row of a 3-D tensor (MoE experts) is
//! encoded with its own matrix's weights, exactly as `quantize_row_weighted` encodes it
//! alone; a tensor without weights gets the reference quantizer; weights of the wrong length
//! are refused before anything is written.

use ggrs_core::gguf::{GgufFile, GgufWriter};
use ggrs_core::quantize::{quantize_file, QuantizeError, QuantizeOptions, QuantizePlan};
use ggrs_core::quants::{quantize_row_dyn, quantize_row_weighted_dyn};
use ggrs_core::DType;

const NE: [usize; 3] = [64, 2, 3];

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / 16_777_216.0 - 0.5
        })
        .collect()
}

#[test]
fn experts_take_their_own_weights() {
    let dir = std::env::temp_dir();
    let pid = std::process::id();
    let (src, out) = (
        dir.join(format!("ggrs-qi-src-{pid}.gguf")),
        dir.join(format!("ggrs-qi-out-{pid}.gguf")),
    );
    let n = NE.iter().product::<usize>();
    let (x, y) = (values(n, 1), values(n, 2));
    let mut w = GgufWriter::new();
    w.add_tensor_info("experts", DType::F32, &NE).unwrap();
    w.add_tensor_info("plain", DType::F32, &NE).unwrap();
    let blobs = [&x, &y];
    let mut k = 0;
    w.write_to_path(&src, |_, sink| {
        let b: Vec<u8> = blobs[k].iter().flat_map(|v| v.to_le_bytes()).collect();
        k += 1;
        sink.write_all(&b)
    })
    .unwrap();
    let input = GgufFile::open(&src).unwrap();
    // Weights differ per expert, so a row given another expert's weights would differ.
    let imp: Vec<f32> = values(NE[0] * NE[2], 3)
        .iter()
        .map(|v| v * v * 4.0 + 0.01)
        .collect();
    let mut plan = QuantizePlan::from_fn(&input, |_| DType::Q4_0);
    plan.importance = vec![Some(imp.clone()), None];
    quantize_file(&input, &out, &plan, &QuantizeOptions::default(), |_| {}).unwrap();
    let got = GgufFile::open(&out).unwrap();
    let row = DType::Q4_0.row_size(NE[0]);
    let data = got.tensor_data(got.tensor("experts").unwrap());
    for r in 0..NE[1] * NE[2] {
        let e = r / NE[1];
        let mut want = vec![0u8; row];
        let xr = &x[r * NE[0]..(r + 1) * NE[0]];
        quantize_row_weighted_dyn(DType::Q4_0, xr, &imp[e * NE[0]..(e + 1) * NE[0]], &mut want)
            .unwrap();
        assert_eq!(
            &data[r * row..(r + 1) * row],
            &want[..],
            "row {r} (expert {e})"
        );
    }
    let data = got.tensor_data(got.tensor("plain").unwrap());
    for r in 0..NE[1] * NE[2] {
        let mut want = vec![0u8; row];
        quantize_row_dyn(DType::Q4_0, &y[r * NE[0]..(r + 1) * NE[0]], &mut want).unwrap();
        assert_eq!(&data[r * row..(r + 1) * row], &want[..], "plain row {r}");
    }
    // One expert's weights only: refused.
    plan.importance = vec![Some(imp[..NE[0]].to_vec()), None];
    let err = quantize_file(&input, &out, &plan, &QuantizeOptions::default(), |_| {}).unwrap_err();
    assert!(
        matches!(err, QuantizeError::ImportanceLength { .. }),
        "{err}"
    );
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&out);
}
