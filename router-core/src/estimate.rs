//! Estimation, on every request's path and in microseconds: no tokenizer pass over the prompt.
//!
//! A request gets two estimates per candidate (see "A request's life" in the design notes):
//! - **what the provider's limiter counts** when the request arrives, which admission reserves:
//!   a prompt estimate from the prompt's characters plus `max_tokens` (the model's
//!   `max_output_tokens` when the request sets none);
//! - **what the request will cost**, which ranks candidates and is charged to budgets: the
//!   prompt estimate plus the expected completion, `min(max_tokens, 1.5 x the recent average
//!   completion of that deployment)`.
//!
//! The prompt estimate is `ceil(chars / 4)` (OpenAI's own limiter estimate) scaled by a ratio
//! learnt per deployment from the prompt tokens the provider reports, so it converges on each
//! provider's accounting whatever its tokenizer. [`count`] (tiktoken's o200k, loaded on first use)
//! stays for the places a person reads an exact count.

use std::sync::Mutex;

use crate::config::{Api, DeploymentId, Registry};
use crate::ledger::{ActualUsage, Reservation};

/// Characters per token of OpenAI's pre-call prompt estimate.
const CHARS_PER_TOKEN: u64 = 4;

/// Weight of the newest observation in the moving averages.
const ALPHA: f64 = 0.2;

/// The range a deployment's prompt ratio (reported ÷ [`PromptSize::base_tokens`]) is kept in,
/// each report's ratio first: wider than any tokenizer's spread (CJK text counts up to about
/// four times `chars / 4`), narrow enough that one absurd report cannot price a deployment out
/// of every admission, which would leave it no report to learn better from.
const RATIO_RANGE: (f64, f64) = (1.0 / 16.0, 16.0);

/// Tokens one image is taken to cost in a prompt: the most any provider documents for an image
/// it does not scale down (Anthropic: about 1,600 for 1.15 megapixels; OpenAI: 765 for a
/// 1024 x 1024 image at high detail; Gemini: 258). Conservative: admission may reserve more than
/// the provider counts, never less.
pub const IMAGE_TOKENS: u64 = 1600;

/// A prompt's size as estimation needs it: the characters of all its text (message contents,
/// tool calls and results, tool definitions as JSON) and its images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptSize {
    /// Unicode scalar values in all its text.
    pub chars: u64,
    /// Images in it.
    pub images: u64,
}

impl PromptSize {
    /// The size of a text-only chat whose texts are `contents`.
    pub fn of<'a>(contents: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            chars: contents.into_iter().map(|c| c.chars().count() as u64).sum(),
            images: 0,
        }
    }

    /// This size with `tokens` more tokens given as token ids (an embedding input): counted as
    /// the characters that make that many tokens, so that [`PromptSize::base_tokens`] counts
    /// each id once.
    #[must_use]
    pub fn with_tokens(mut self, tokens: u64) -> Self {
        self.chars = self
            .chars
            .saturating_add(tokens.saturating_mul(CHARS_PER_TOKEN));
        self
    }

    /// This size with `images` more images.
    #[must_use]
    pub fn with_images(mut self, images: u64) -> Self {
        self.images = self.images.saturating_add(images);
        self
    }

    /// `ceil(chars / 4)` plus [`IMAGE_TOKENS`] per image, at least 1: the prompt as OpenAI's
    /// limiter estimates it before a request runs, and the base every deployment's learnt ratio
    /// scales.
    pub fn base_tokens(self) -> u64 {
        let images = self.images.saturating_mul(IMAGE_TOKENS);
        self.chars
            .div_ceil(CHARS_PER_TOKEN)
            .saturating_add(images)
            .max(1)
    }
}

/// How a provider's limiter counts a request against its token limits, and so what the ledger
/// keeps counted once the real usage is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accounting {
    /// Counted once, when the request arrives (a prompt estimate plus `max_tokens`), and never
    /// corrected: the window keeps the larger of what was reserved and what was used.
    /// OpenAI-compatible servers; also Gemini, whose limiter is not documented (the safe choice).
    AtArrival,
    /// Input counted as the provider tokenizes it; output counted from `max_tokens` when the
    /// request arrives and corrected to the real output when it ends (Anthropic's ITPM/OTPM):
    /// the window keeps what was used.
    Corrected,
}

impl Accounting {
    /// How `api`'s providers count.
    pub fn of(api: Api) -> Self {
        match api {
            Api::OpenAi | Api::Gemini => Accounting::AtArrival,
            Api::Anthropic => Accounting::Corrected,
        }
    }

    /// Of a reported prompt of `prompt` tokens, `cached` of them read from the provider's prompt
    /// cache, those this limiter counts: Anthropic's ITPM leaves cache reads out (current
    /// models); the others count the whole prompt.
    pub fn counted_prompt(self, prompt: u64, cached: u64) -> u64 {
        match self {
            Accounting::AtArrival => prompt,
            Accounting::Corrected => prompt.saturating_sub(cached),
        }
    }

    /// The (input, output) tokens that stay counted for a request that reserved `reserved` and
    /// used `used`, both (input, output).
    pub fn charged(self, reserved: (u64, u64), used: (u64, u64)) -> (u64, u64) {
        match self {
            Accounting::AtArrival => (reserved.0.max(used.0), reserved.1.max(used.1)),
            Accounting::Corrected => used,
        }
    }

    /// The settlement of reservation `r` for a request that used `prompt` + `completion`
    /// tokens at `cost_micros`: the tokens this limiter keeps counted, and the real cost.
    pub fn settlement(
        self,
        r: &Reservation,
        prompt: u64,
        completion: u64,
        cost_micros: u64,
    ) -> ActualUsage {
        let reserved = (r.input_tokens, r.tokens.saturating_sub(r.input_tokens));
        let (input, output) = self.charged(reserved, (prompt, completion));
        ActualUsage {
            tokens: input.saturating_add(output),
            input_tokens: input,
            cost_micros,
        }
    }
}

/// What one deployment has taught the estimator.
#[derive(Debug, Clone, Copy)]
struct Learnt {
    /// Moving average of completion tokens; `None` before any answer.
    output: Option<f64>,
    /// Moving average of reported prompt tokens per [`PromptSize::base_tokens`].
    prompt_ratio: f64,
}

/// Per-deployment estimates, learnt from what providers report. Shared by every request of a
/// router (and of a simulated one).
#[derive(Debug)]
pub struct Estimator {
    default_output: u64,
    learnt: Mutex<Vec<Learnt>>,
}

/// The prompt ratio a deployment starts from, before its provider reported anything: Anthropic's
/// tokenizer yields noticeably more tokens than four characters each for English text.
fn initial_ratio(api: Api) -> f64 {
    match api {
        Api::OpenAi | Api::Gemini => 1.0,
        Api::Anthropic => 1.2,
    }
}

impl Estimator {
    /// An estimator for `registry`'s deployments, answering `defaults.output_tokens` for the
    /// completion before any history.
    pub fn new(registry: &Registry) -> Self {
        let learnt = registry
            .deployment_ids()
            .map(|d| Learnt {
                output: None,
                prompt_ratio: initial_ratio(registry.provider_of(d).api),
            })
            .collect();
        Self {
            default_output: registry.defaults.output_tokens,
            learnt: Mutex::new(learnt),
        }
    }

    fn learnt(&self, d: DeploymentId) -> Option<Learnt> {
        let learnt = self.learnt.lock().unwrap_or_else(|e| e.into_inner());
        learnt.get(d.0).copied()
    }

    /// Estimated prompt tokens of `size` on `d`, by what its provider reported so far.
    pub fn prompt_tokens(&self, d: DeploymentId, size: PromptSize) -> u64 {
        let ratio = self.learnt(d).map_or(1.0, |l| l.prompt_ratio);
        scaled(size.base_tokens(), ratio)
    }

    /// Expected completion tokens on `d` for a request capped at `max_tokens`.
    pub fn output_tokens(&self, d: DeploymentId, max_tokens: Option<u64>) -> u64 {
        let guess = match self.learnt(d).and_then(|l| l.output) {
            Some(avg) => (1.5 * avg).ceil() as u64,
            None => self.default_output,
        };
        max_tokens.map_or(guess, |cap| guess.min(cap)).max(1)
    }

    /// Learns from a request of `size` that `d` reported as `prompt_tokens` + `completion_tokens`.
    pub fn record(
        &self,
        d: DeploymentId,
        size: PromptSize,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) {
        let mut learnt = self.learnt.lock().unwrap_or_else(|e| e.into_inner());
        let Some(l) = learnt.get_mut(d.0) else {
            return;
        };
        let x = completion_tokens as f64;
        l.output = Some(l.output.map_or(x, |avg| avg + ALPHA * (x - avg)));
        if prompt_tokens > 0 {
            let (low, high) = RATIO_RANGE;
            let ratio = (prompt_tokens as f64 / size.base_tokens() as f64).clamp(low, high);
            l.prompt_ratio = (l.prompt_ratio + ALPHA * (ratio - l.prompt_ratio)).clamp(low, high);
        }
    }
}

/// `tokens` scaled by `ratio`, rounded up, saturating.
fn scaled(tokens: u64, ratio: f64) -> u64 {
    let x = (tokens as f64 * ratio).ceil();
    if x >= u64::MAX as f64 {
        u64::MAX
    } else {
        x as u64
    }
}

/// Tokens a chat format adds per message (role and separators) and once per reply, in [`count`].
const PER_MESSAGE: u64 = 4;
const PER_REPLY: u64 = 3;

/// Exact o200k tokens of a chat whose message contents are `contents`, framing included: for
/// showing a person (`llmroute chat -v`, `preview`). Loads the tokenizer on first use (about
/// 200 ms), so the request path never calls it.
pub fn count<'a>(contents: impl IntoIterator<Item = &'a str>) -> u64 {
    let bpe = tiktoken_rs::o200k_base_singleton();
    contents
        .into_iter()
        .map(|c| bpe.count_ordinary(c) as u64 + PER_MESSAGE)
        .sum::<u64>()
        + PER_REPLY
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        let yaml = r#"
providers:
  - name: o
    api: openai
    base_url: http://x
    api_key_env: K
    models: [{ name: m, price: { input: 1, output: 1 } }]
  - name: a
    api: anthropic
    base_url: http://x
    api_key_env: K
    models: [{ name: m, price: { input: 1, output: 1 } }]
"#;
        Registry::from_yaml_str(yaml, "t.yaml").unwrap()
    }

    #[test]
    fn the_prompt_estimate_is_a_quarter_of_the_characters_rounded_up() {
        assert_eq!(PromptSize::of(["abcd", "e"]).base_tokens(), 2);
        assert_eq!(PromptSize::of(["é".repeat(8).as_str()]).base_tokens(), 2);
        assert_eq!(PromptSize::of([""]).base_tokens(), 1);
        assert_eq!(
            PromptSize::of(["x".repeat(8_000).as_str()]).base_tokens(),
            2_000
        );
    }

    #[test]
    fn token_ids_count_one_token_each() {
        assert_eq!(PromptSize::default().with_tokens(7).base_tokens(), 7);
        assert_eq!(PromptSize::of(["abcd"]).with_tokens(3).base_tokens(), 4);
    }

    #[test]
    fn the_prompt_ratio_starts_per_api_and_converges_on_what_the_provider_reports() {
        let e = Estimator::new(&registry());
        let (o, a) = (DeploymentId(0), DeploymentId(1));
        let size = PromptSize {
            chars: 4_000,
            images: 0,
        };
        assert_eq!(e.prompt_tokens(o, size), 1_000);
        assert_eq!(e.prompt_tokens(a, size), 1_200);
        for _ in 0..60 {
            e.record(a, size, 1_500, 10);
        }
        assert!((1_495..=1_500).contains(&e.prompt_tokens(a, size)));
        assert_eq!(e.prompt_tokens(o, size), 1_000);
    }

    #[test]
    fn one_absurd_prompt_count_moves_the_ratio_a_bounded_step_that_later_reports_undo() {
        let e = Estimator::new(&registry());
        let o = DeploymentId(0);
        let short = PromptSize::of(["x".repeat(20).as_str()]);
        let long = PromptSize::of(["x".repeat(400).as_str()]);
        // 5 million tokens reported for a 20-character prompt: a ratio of a million.
        e.record(o, short, 5_000_000, 1);
        let after = e.prompt_tokens(o, long);
        // At most a fifth of the way to 16 from 1: 100 base tokens estimated at 400, not 20M.
        assert_eq!(after, 400);
        for _ in 0..40 {
            e.record(o, long, 100, 1);
        }
        assert!(
            e.prompt_tokens(o, long) <= 101,
            "{}",
            e.prompt_tokens(o, long)
        );
        // Nor can reports of nothing at all drive it to zero.
        for _ in 0..200 {
            e.record(o, long, 1, 1);
        }
        assert_eq!(e.prompt_tokens(o, long), 7);
    }

    #[test]
    fn output_estimate_uses_the_default_then_history_capped_by_max_tokens() {
        let e = Estimator::new(&registry());
        let d = DeploymentId(1);
        let size = PromptSize {
            chars: 40,
            images: 0,
        };
        assert_eq!(e.output_tokens(d, None), 512);
        assert_eq!(e.output_tokens(d, Some(100)), 100);
        e.record(d, size, 0, 200);
        assert_eq!(e.output_tokens(d, None), 300);
        e.record(d, size, 0, 100);
        // avg = 200 + 0.2 * (100 - 200) = 180; x1.5 = 270
        assert_eq!(e.output_tokens(d, Some(1000)), 270);
        assert_eq!(e.output_tokens(DeploymentId(0), None), 512);
    }

    #[test]
    fn at_arrival_keeps_what_was_reserved_corrected_keeps_what_was_used() {
        let reserved = (1_000, 256);
        assert_eq!(
            Accounting::AtArrival.charged(reserved, (900, 40)),
            (1_000, 256)
        );
        assert_eq!(
            Accounting::AtArrival.charged(reserved, (1_100, 300)),
            (1_100, 300)
        );
        assert_eq!(
            Accounting::Corrected.charged(reserved, (900, 40)),
            (900, 40)
        );
        assert_eq!(Accounting::of(Api::OpenAi), Accounting::AtArrival);
        assert_eq!(Accounting::of(Api::Gemini), Accounting::AtArrival);
        assert_eq!(Accounting::of(Api::Anthropic), Accounting::Corrected);
    }

    /// An agent's turn is mostly cache reads: Anthropic's ITPM does not count them, so neither
    /// does its settlement; a limiter counting at arrival counts the whole prompt.
    #[test]
    fn cache_reads_count_against_a_corrected_limit_only_where_the_provider_counts_them() {
        assert_eq!(Accounting::Corrected.counted_prompt(20_300, 20_000), 300);
        assert_eq!(Accounting::AtArrival.counted_prompt(20_300, 20_000), 20_300);
        assert_eq!(
            Accounting::Corrected.counted_prompt(5, 9),
            0,
            "never below zero"
        );
    }
}
