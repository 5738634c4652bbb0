//! What a model's tokens cost, as its provider bills them: input, output, prompt-cache reads and
//! writes (for five minutes or an hour), and a higher band for long prompts. Written once here;
//! cost, budgets, receipts, usage records and ranking all ask [`Price::bill`].

/// Per-token prices of one prompt-size band, USD per million tokens. All are positive and
/// finite, but for an embedding model's output price, which may be 0 (it writes no output).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Prompt tokens neither read from nor written to the cache.
    pub input_per_mtok: f64,
    /// Completion tokens, reasoning included.
    pub output_per_mtok: f64,
    /// Prompt tokens read from the provider's cache; `None`: the input price.
    pub cached_input_per_mtok: Option<f64>,
    /// Prompt tokens written to the cache for five minutes; `None`: the input price.
    pub cache_write_per_mtok: Option<f64>,
    /// Prompt tokens written to the cache for an hour; `None`: the five-minute write price.
    pub cache_write_1h_per_mtok: Option<f64>,
}

impl Rates {
    /// `input` and `output` alone: cache reads and writes at the input price.
    pub fn new(input_per_mtok: f64, output_per_mtok: f64) -> Self {
        Rates {
            input_per_mtok,
            output_per_mtok,
            cached_input_per_mtok: None,
            cache_write_per_mtok: None,
            cache_write_1h_per_mtok: None,
        }
    }

    /// The price of a prompt token read from the cache.
    pub fn cached(&self) -> f64 {
        self.cached_input_per_mtok.unwrap_or(self.input_per_mtok)
    }

    /// The price of a prompt token written to the cache for five minutes.
    pub fn write(&self) -> f64 {
        self.cache_write_per_mtok.unwrap_or(self.input_per_mtok)
    }

    /// The price of a prompt token written to the cache for an hour.
    pub fn write_1h(&self) -> f64 {
        self.cache_write_1h_per_mtok.unwrap_or_else(|| self.write())
    }
}

/// A band of higher prices for requests whose prompt is longer than `prompt_tokens` (Gemini 2.5
/// Pro and Claude's 1M-token context above 200k): the whole request is billed at its rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriceTier {
    /// The band applies to prompts of more tokens than this (cache reads and writes included).
    pub prompt_tokens: u64,
    /// Its prices.
    pub rates: Rates,
}

/// A model's price: its rates, and higher bands for long prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct Price {
    /// Rates of prompts up to the first band.
    pub base: Rates,
    /// Bands by prompt size, smallest threshold first.
    pub above: Vec<PriceTier>,
}

/// A request's tokens as a provider bills them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Billed {
    /// Prompt tokens, cache reads and writes included.
    pub prompt: u64,
    /// Of `prompt`, read from the cache.
    pub cached: u64,
    /// Of `prompt`, written to the cache for five minutes.
    pub written: u64,
    /// Of `prompt`, written to the cache for an hour.
    pub written_1h: u64,
    /// Completion tokens, reasoning included.
    pub output: u64,
}

impl Price {
    /// `input` and `output` rates alone, no bands.
    pub fn new(input_per_mtok: f64, output_per_mtok: f64) -> Self {
        Price::flat(Rates::new(input_per_mtok, output_per_mtok))
    }

    /// `rates` whatever the prompt's size.
    pub fn flat(rates: Rates) -> Self {
        Price {
            base: rates,
            above: Vec::new(),
        }
    }

    /// The rates a prompt of `prompt` tokens is billed at: those of the highest band it is
    /// above, else the base.
    pub fn rates_for(&self, prompt: u64) -> &Rates {
        let above = self.above.iter().rev().find(|t| prompt > t.prompt_tokens);
        above.map_or(&self.base, |t| &t.rates)
    }

    /// What `b` costs, USD. Each part of the prompt is billed once, in this order: cache reads,
    /// hour-long writes, five-minute writes (each at most what is left of the prompt), the rest
    /// at the input price.
    pub fn bill(&self, b: &Billed) -> f64 {
        let r = self.rates_for(b.prompt);
        let cached = b.cached.min(b.prompt);
        let left = b.prompt - cached;
        let written_1h = b.written_1h.min(left);
        let written = b.written.min(left - written_1h);
        let plain = left - written_1h - written;
        (plain as f64 * r.input_per_mtok
            + cached as f64 * r.cached()
            + written as f64 * r.write()
            + written_1h as f64 * r.write_1h()
            + b.output as f64 * r.output_per_mtok)
            / 1_000_000.0
    }

    /// Cost in USD of `input` prompt tokens and `output` completion tokens.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        self.cost_cached(input, 0, output)
    }

    /// Cost in USD of `input` prompt tokens, `cached` of them read from the prompt cache, and
    /// `output` completion tokens.
    pub fn cost_cached(&self, input: u64, cached: u64, output: u64) -> f64 {
        self.bill(&Billed {
            prompt: input,
            cached,
            output,
            ..Billed::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Sonnet 4.5's list prices: $3 / $15, reads $0.30, 5-minute writes $3.75, hour
    /// writes $6; above 200k prompt tokens $6 / $22.50, reads $0.60, writes $7.50 and $12.
    fn sonnet() -> Price {
        let rates = |input: f64, output: f64| Rates {
            input_per_mtok: input,
            output_per_mtok: output,
            cached_input_per_mtok: Some(input * 0.1),
            cache_write_per_mtok: Some(input * 1.25),
            cache_write_1h_per_mtok: Some(input * 2.0),
        };
        Price {
            base: rates(3.0, 15.0),
            above: vec![PriceTier {
                prompt_tokens: 200_000,
                rates: rates(6.0, 22.5),
            }],
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn each_part_of_the_prompt_is_billed_at_its_own_price() {
        let b = Billed {
            prompt: 10_000,
            cached: 6_000,
            written: 2_000,
            written_1h: 1_000,
            output: 500,
        };
        // 1000 plain at $3, 6000 reads at $0.30, 2000 writes at $3.75, 1000 at $6, 500 out at $15.
        let want =
            (1_000.0 * 3.0 + 6_000.0 * 0.3 + 2_000.0 * 3.75 + 1_000.0 * 6.0 + 500.0 * 15.0) / 1e6;
        assert!(close(sonnet().bill(&b), want), "{}", sonnet().bill(&b));
    }

    #[test]
    fn a_prompt_above_the_band_is_billed_whole_at_its_rates_and_one_at_it_is_not() {
        let at = Billed {
            prompt: 200_000,
            output: 1_000,
            ..Billed::default()
        };
        assert!(close(
            sonnet().bill(&at),
            (200_000.0 * 3.0 + 1_000.0 * 15.0) / 1e6
        ));
        let above = Billed {
            prompt: 300_000,
            cached: 100_000,
            output: 1_000,
            ..Billed::default()
        };
        let want = (200_000.0 * 6.0 + 100_000.0 * 0.6 + 1_000.0 * 22.5) / 1e6;
        assert!(close(sonnet().bill(&above), want));
    }

    #[test]
    fn parts_claimed_twice_are_billed_once_and_missing_prices_fall_back() {
        let b = Billed {
            prompt: 100,
            cached: 80,
            written: 50,
            written_1h: 50,
            output: 0,
        };
        // 80 reads, then 20 hour-long writes: nothing is left for the rest.
        assert!(close(sonnet().bill(&b), (80.0 * 0.3 + 20.0 * 6.0) / 1e6));
        let plain = Price::new(2.0, 8.0);
        assert!(close(plain.bill(&b), 100.0 * 2.0 / 1e6));
    }
}
