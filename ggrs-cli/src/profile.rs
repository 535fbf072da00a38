//! Per-node timings summed over the steps of a measurement, printed as the tables of
//! `ggrs bench --profile` and `ggrs embed --profile`: time per op type, per matrix-product
//! weight type and shape, and the most expensive nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use ggrs_core::NodeTiming;

/// Node times summed over the measured steps of one test.
#[derive(Default)]
pub struct Profile {
    steps: usize,
    /// Per op name: nodes run and total time.
    ops: BTreeMap<&'static str, (usize, Duration)>,
    /// Per graph node (index, op, shape): times run and total time.
    nodes: BTreeMap<(usize, &'static str, [usize; 4]), (usize, Duration)>,
    /// Per matrix-product weight type and output shape: nodes run and total time.
    weights: BTreeMap<(String, [usize; 4]), (usize, Duration)>,
}

impl Profile {
    /// Adds the per-node times of one computed step.
    pub fn add(&mut self, timings: &[NodeTiming]) {
        self.steps += 1;
        for t in timings {
            let o = self.ops.entry(t.op).or_default();
            o.0 += 1;
            o.1 += t.time;
            let n = self.nodes.entry((t.node, t.op, t.ne)).or_default();
            n.0 += 1;
            n.1 += t.time;
            if let Some(w) = t.weight {
                let e = self.weights.entry((w.to_string(), t.ne)).or_default();
                e.0 += 1;
                e.1 += t.time;
            }
        }
    }

    /// Per-op table, then the `top` most expensive nodes.
    pub fn table(&self, title: &str, top: usize) -> String {
        let total: Duration = self.ops.values().map(|v| v.1).sum();
        let share = |t: Duration| 100.0 * t.as_secs_f64() / total.as_secs_f64().max(1e-12);
        let mut out = format!(
            "\nprofile of {title}: {} steps, {:.2} ms in nodes\n\n| op | nodes | ms | share |\n| --- | ---: | ---: | ---: |\n",
            self.steps,
            total.as_secs_f64() * 1e3
        );
        let mut ops: Vec<_> = self.ops.iter().collect();
        ops.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        for (op, (n, t)) in ops {
            out += &format!(
                "| {op} | {n} | {:.2} | {:.1}% |\n",
                t.as_secs_f64() * 1e3,
                share(*t)
            );
        }
        if !self.weights.is_empty() {
            out +=
                "\n| weight | shape | nodes | ms | share |\n| --- | --- | ---: | ---: | ---: |\n";
            let mut ws: Vec<_> = self.weights.iter().collect();
            ws.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
            for ((w, ne), (n, t)) in ws {
                out += &format!(
                    "| {w} | {ne:?} | {n} | {:.2} | {:.1}% |\n",
                    t.as_secs_f64() * 1e3,
                    share(*t)
                );
            }
        }
        out += "\n| node | op | shape | runs | µs per run | share |\n";
        out += "| ---: | --- | --- | ---: | ---: | ---: |\n";
        let mut nodes: Vec<_> = self.nodes.iter().collect();
        nodes.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        for ((i, op, ne), (n, t)) in nodes.into_iter().take(top) {
            out += &format!(
                "| {i} | {op} | {ne:?} | {n} | {:.1} | {:.1}% |\n",
                t.as_secs_f64() * 1e6 / *n as f64,
                share(*t)
            );
        }
        out
    }
}
