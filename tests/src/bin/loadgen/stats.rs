//! Latency figures of a run: percentiles by nearest rank, in milliseconds.

use std::time::Duration;

use serde_json::{Value, json};

/// p50, p90, p99, the slowest and the mean of `samples` (sorted here), in ms; null when empty.
pub(crate) fn summary(samples: &mut [Duration]) -> Value {
    if samples.is_empty() {
        return Value::Null;
    }
    samples.sort_unstable();
    let total: Duration = samples.iter().sum();
    let count = u32::try_from(samples.len()).unwrap_or(u32::MAX);
    json!({
        "p50": ms(percentile(samples, 50.0)),
        "p90": ms(percentile(samples, 90.0)),
        "p99": ms(percentile(samples, 99.0)),
        "max": ms(samples[samples.len() - 1]),
        "mean": ms(total / count),
    })
}

/// Each sample in µs, to a tenth, for pooling runs.
pub(crate) fn micros(samples: &[Duration]) -> Vec<f64> {
    samples
        .iter()
        .map(|d| (d.as_secs_f64() * 10_000_000.0).round() / 10.0)
        .collect()
}

/// The nearest-rank `p`th percentile of sorted, non-empty `samples`.
fn percentile(samples: &[Duration], p: f64) -> Duration {
    let rank = (p / 100.0 * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Milliseconds to the µs's tenth.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let s = summary(&mut samples);
        assert_eq!(s["p50"], 0.05);
        assert_eq!(s["p99"], 0.099);
        assert_eq!(s["max"], 0.1);
        assert_eq!(summary(&mut []), Value::Null);
        let one = summary(&mut [Duration::from_micros(7)]);
        assert_eq!(one["p50"], 0.007);
        assert_eq!(one["p99"], 0.007);
    }
}
