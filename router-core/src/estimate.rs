//! Estimation: prompt tokens before the call, completion tokens from recent history.
//!
//! Prompt tokens are counted with tiktoken's o200k encoding (exact for OpenAI's current models)
//! and scaled by a calibrated ratio for providers whose tokenizers differ. Completion tokens are
//! estimated as `min(max_tokens, 1.5 x the recent average completion of that deployment)`, or the
//! configured default before any history exists. Settlement corrects whatever the estimate got
//! wrong, so it only needs to be close, not exact.

use std::sync::Mutex;

use crate::config::{Api, DeploymentId};

/// Tokens a chat format adds per message (role and separators) and once per reply.
const PER_MESSAGE: u64 = 4;
const PER_REPLY: u64 = 3;

/// How many tokens a provider's tokenizer makes of what o200k counts as 100. Anthropic's
/// tokenizer yields noticeably more tokens for the same English text; Gemini's about the same.
fn ratio_percent(api: Api) -> u64 {
    match api {
        Api::OpenAi => 100,
        Api::Anthropic => 120,
        Api::Gemini => 100,
    }
}

/// Estimated prompt tokens of a chat whose message contents are `contents`.
pub fn prompt_tokens<'a>(api: Api, contents: impl IntoIterator<Item = &'a str>) -> u64 {
    scale(api, count(contents))
}

/// o200k tokens of a chat whose message contents are `contents`, framing included. Count once,
/// then [`scale`] for each candidate's provider.
pub fn count<'a>(contents: impl IntoIterator<Item = &'a str>) -> u64 {
    let bpe = tiktoken_rs::o200k_base_singleton();
    contents
        .into_iter()
        .map(|c| bpe.count_ordinary(c) as u64 + PER_MESSAGE)
        .sum::<u64>()
        + PER_REPLY
}

/// What `api`'s tokenizer makes of `o200k` o200k tokens.
pub fn scale(api: Api, o200k: u64) -> u64 {
    o200k.saturating_mul(ratio_percent(api)) / 100
}

/// Completion-size history per deployment: an exponentially weighted moving average.
#[derive(Debug)]
pub struct OutputEstimator {
    default: u64,
    averages: Mutex<Vec<Option<f64>>>,
}

/// Weight of the newest completion in the moving average.
const ALPHA: f64 = 0.2;

impl OutputEstimator {
    /// An estimator for `deployments` deployments that answers `default` before any history.
    pub fn new(deployments: usize, default: u64) -> Self {
        Self {
            default,
            averages: Mutex::new(vec![None; deployments]),
        }
    }

    /// Estimated completion tokens on `d` for a request capped at `max_tokens`.
    pub fn estimate(&self, d: DeploymentId, max_tokens: Option<u64>) -> u64 {
        let averages = self.averages.lock().unwrap_or_else(|e| e.into_inner());
        let guess = match averages.get(d.0).copied().flatten() {
            Some(avg) => (1.5 * avg).ceil() as u64,
            None => self.default,
        };
        max_tokens.map_or(guess, |cap| guess.min(cap)).max(1)
    }

    /// Records a completion's real size.
    pub fn record(&self, d: DeploymentId, completion_tokens: u64) {
        let mut averages = self.averages.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = averages.get_mut(d.0) {
            let x = completion_tokens as f64;
            *slot = Some(slot.map_or(x, |avg| avg + ALPHA * (x - avg)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_tokens_count_content_and_framing() {
        // "hello world" is 2 o200k tokens; + 4 per message + 3 per reply.
        assert_eq!(prompt_tokens(Api::OpenAi, ["hello world"]), 9);
        assert_eq!(
            prompt_tokens(Api::OpenAi, ["hello world", "hello world"]),
            15
        );
        assert!(
            prompt_tokens(Api::Anthropic, ["hello world"; 50])
                > prompt_tokens(Api::OpenAi, ["hello world"; 50])
        );
    }

    #[test]
    fn output_estimate_uses_the_default_then_history_capped_by_max_tokens() {
        let e = OutputEstimator::new(2, 512);
        let d = DeploymentId(1);
        assert_eq!(e.estimate(d, None), 512);
        assert_eq!(e.estimate(d, Some(100)), 100);
        e.record(d, 200);
        assert_eq!(e.estimate(d, None), 300);
        e.record(d, 100);
        // avg = 200 + 0.2 * (100 - 200) = 180; x1.5 = 270
        assert_eq!(e.estimate(d, Some(1000)), 270);
        assert_eq!(e.estimate(DeploymentId(0), None), 512);
    }
}
