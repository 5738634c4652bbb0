//! A request's plan: its candidates cheapest first, each with its own estimate, what to reserve,
//! and when to give up. Every driver plans through [`Plan::new`], so the SDK, the simulator and
//! the gateway estimate and rank alike.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{Billed, DeploymentId, ModelKind, Registry};
use crate::estimate::{Accounting, Estimator, PromptSize};
use crate::ledger::{
    MAX_SLOT_TTL, Need, Scope, TICKET_TTL_MS, TenantNeed, TenantSpec, Ticket, usd_to_micros,
};
use crate::select;

/// How urgent a request is. Batch requests may use only `priorities.batch_share` of each
/// deployment's capacity, so interactive ones always find headroom across all instances; within
/// an instance, waiting interactive requests retry before waiting batch ones (a head start that
/// shrinks as a batch request ages, so it never starves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Someone is waiting for the answer.
    #[default]
    Interactive,
    /// Background work.
    Batch,
}

impl Priority {
    /// `interactive` or `batch`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Batch => "batch",
        }
    }
}

/// What one candidate is expected to use for this request, and what its provider's limiter
/// will count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Estimate {
    /// Expected prompt tokens, as the candidate's provider reports them.
    pub prompt_tokens: u64,
    /// Expected completion tokens, from the candidate's recent history, capped by `max_tokens`.
    pub completion_tokens: u64,
    /// Prompt tokens the provider's limiter counts when the request arrives (admission reserves
    /// them against TPM and ITPM).
    pub counted_prompt: u64,
    /// Completion tokens the limiter counts: `max_tokens`, else the model's cap (against TPM
    /// and OTPM).
    pub counted_output: u64,
    /// Of the prompt tokens, those expected to be read from the provider's prompt cache
    /// ([`Ask::cache_reads`]): priced at the cached-input price, and left out of
    /// `counted_prompt` where the limiter does not count them.
    pub cached_tokens: u64,
    /// Of the prompt tokens, those expected to be written to the provider's cache: for a
    /// request that marks prefixes to cache ([`Ask::writes_cache`]), all it does not read from
    /// it (an upper bound: the part after the last marker is not written). Priced at the
    /// cache-write price, which is the input price where the provider bills no writes.
    pub cache_write_tokens: u64,
}

impl Estimate {
    /// What the estimate is billed as.
    pub fn billed(&self) -> Billed {
        Billed {
            prompt: self.prompt_tokens,
            cached: self.cached_tokens,
            written: self.cache_write_tokens,
            written_1h: 0,
            output: self.completion_tokens,
        }
    }
}

/// The most tokens a request's prompt, or its output, is counted as: no model reads or writes
/// 4 billion tokens, and a `max_tokens` of `u64::MAX` (a client controls it) would otherwise
/// wrap the ledger's sums.
pub(crate) const MAX_COUNTED: u64 = 1 << 32;

impl Estimate {
    /// What admission reserves against TPM: the limiter's count of prompt and output.
    pub fn counted(&self) -> u64 {
        self.counted_prompt.saturating_add(self.counted_output)
    }
}

/// What a driver knows of a request before planning it.
#[derive(Debug, Clone)]
pub struct Ask {
    /// The prompt's size.
    pub prompt: PromptSize,
    /// The request's cap on completion tokens.
    pub max_tokens: Option<u64>,
    /// The accounts charged: the tenant's when it has a tier, then the key's when it has
    /// limits or budgets of its own.
    pub accounts: Vec<TenantSpec>,
    /// Interactive or batch.
    pub priority: Priority,
    /// How long the request may take in all.
    pub deadline: Duration,
    /// The prompt tokens each candidate's provider is expected to read from its cache, as
    /// recorded for the prompt's prefix ([`PromptCache`](crate::prompt_cache::PromptCache));
    /// a candidate not listed reads none.
    pub cache_reads: Vec<(DeploymentId, u64)>,
    /// The request marks prompt prefixes to cache: a provider that bills cache writes
    /// (Anthropic) is expected to write what it does not read.
    pub writes_cache: bool,
}

/// One request's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Candidates, cheapest first for this request.
    pub ranked: Vec<DeploymentId>,
    /// Each ranked candidate's estimate, in the same order.
    pub estimates: Vec<Estimate>,
    /// What the ledger reserves.
    pub need: Need,
    /// Interactive or batch.
    pub priority: Priority,
    /// When the request started (ms, the driver's clock).
    pub started_ms: u64,
    /// When it gives up (ms).
    pub deadline_ms: u64,
    /// The prompt's size, for learning from what the provider reports.
    pub prompt: PromptSize,
}

impl Plan {
    /// Plans `ask` over `candidates` (deployments that serve the model and have a key) at
    /// `now_ms`: each candidate's expected prompt and completion by what its provider reported
    /// so far, ranked by the cost of that estimate, and the tenant's cost on each candidate for
    /// its budget; each candidate's reservation is what its provider's limiter will count (see
    /// [`Estimate`]); batch requests get `priorities.batch_share` of each limit.
    pub fn new(
        registry: &Registry,
        estimator: &Estimator,
        candidates: &[DeploymentId],
        ask: Ask,
        now_ms: u64,
    ) -> Plan {
        let estimate_of = |d: DeploymentId| {
            let prompt_tokens = estimator.prompt_tokens(d, ask.prompt);
            let cached_tokens = ask
                .cache_reads
                .iter()
                .find(|(c, _)| *c == d)
                .map_or(0, |&(_, tokens)| tokens.min(prompt_tokens));
            // A limiter that counts at arrival counts its own character estimate at least; a
            // corrected one (Anthropic's ITPM) does not count what is read from the cache.
            let counted_prompt = match Accounting::of(registry.provider_of(d).api) {
                Accounting::AtArrival => prompt_tokens.max(ask.prompt.base_tokens()),
                Accounting::Corrected => prompt_tokens - cached_tokens,
            };
            let counted_prompt = counted_prompt.min(MAX_COUNTED);
            let cache_write_tokens = if ask.writes_cache {
                prompt_tokens - cached_tokens
            } else {
                0
            };
            // An embedding model writes nothing: no output reserved, ranked or budgeted.
            if registry.deployment(d).kind == ModelKind::Embedding {
                return Estimate {
                    prompt_tokens,
                    completion_tokens: 0,
                    counted_prompt,
                    counted_output: 0,
                    cached_tokens,
                    cache_write_tokens: 0,
                };
            }
            // The model's output cap bounds the expected completion too: without it a small
            // model would be ranked and budgeted as if it could write the default guess.
            let counted_output = ask
                .max_tokens
                .unwrap_or_else(|| registry.output_cap(d))
                .min(MAX_COUNTED);
            Estimate {
                prompt_tokens,
                completion_tokens: estimator.output_tokens(d, Some(counted_output)),
                counted_prompt,
                counted_output,
                cached_tokens,
                cache_write_tokens,
            }
        };
        let cost = |d: DeploymentId, e: &Estimate| registry.deployment(d).price.bill(&e.billed());
        let ranked: Vec<DeploymentId> =
            select::rank_by_cost(candidates, |d| cost(d, &estimate_of(d)))
                .into_iter()
                .map(|r| r.deployment)
                .collect();
        let estimates: Vec<Estimate> = ranked.iter().map(|&d| estimate_of(d)).collect();
        // Drivers renew the slot while the request lives, so it expires only with a dead holder.
        let slot_ttl = Duration::from_millis(registry.defaults.slot_ttl_ms).min(MAX_SLOT_TTL);
        let largest = estimates.iter().map(Estimate::counted).max().unwrap_or(0);
        let largest_prompt = estimates.iter().map(|e| e.counted_prompt).max();
        // Each candidate's counted prompt goes against ITPM, its counted output against OTPM.
        let mut need = Need::new(largest, slot_ttl)
            .with_candidate_tokens(estimates.iter().map(Estimate::counted).collect())
            .with_input_tokens(largest_prompt.unwrap_or(0))
            .with_candidate_input_tokens(estimates.iter().map(|e| e.counted_prompt).collect());
        need.tenant = (!ask.accounts.is_empty()).then(|| TenantNeed {
            specs: ask.accounts,
            costs: ranked
                .iter()
                .zip(&estimates)
                .map(|(&d, e)| usd_to_micros(cost(d, e)))
                .collect(),
        });
        if ask.priority == Priority::Batch {
            // To the nearest percent (0.29 is 28.999... times 100), and below 100 % unless the
            // whole is configured: something always stays free for interactive requests.
            let configured = registry.priorities.batch_share;
            let share = (configured * 100.0).round();
            let share = if configured < 1.0 {
                share.min(99.0)
            } else {
                share
            };
            need.share_percent = share.clamp(1.0, 100.0) as u8;
        }
        // One ticket for the request's whole life: it keeps its place in line across waits.
        need.line = Some(Ticket {
            id: fastrand::u64(1..),
            handicap_ms: match ask.priority {
                Priority::Batch => registry.priorities.batch_aging.as_millis() as u64,
                Priority::Interactive => 0,
            },
            ttl_ms: TICKET_TTL_MS,
            join: true,
            batch: ask.priority == Priority::Batch,
            queued: false,
        });
        let deadline = u64::try_from(ask.deadline.as_millis()).unwrap_or(u64::MAX);
        let deadline_ms = now_ms.saturating_add(deadline);
        Plan {
            ranked,
            estimates,
            need,
            priority: ask.priority,
            started_ms: now_ms,
            deadline_ms,
            prompt: ask.prompt,
        }
    }

    /// What to ask the ledger for when admitting on `candidates` (the ranked ones, or a subset
    /// of them in the same order after a failover): each candidate's own tokens and tenant cost,
    /// in that order.
    pub fn need_for(&self, candidates: &[DeploymentId]) -> Need {
        if candidates == self.ranked.as_slice() {
            return self.need.clone();
        }
        let rank = |d: DeploymentId| self.ranked.iter().position(|&r| r == d);
        let mut need = self.need.clone();
        need.candidate_tokens = candidates
            .iter()
            .map(|&d| rank(d).map_or(need.tokens, |i| need.tokens_on(i)))
            .collect();
        need.candidate_input_tokens = candidates
            .iter()
            .map(|&d| rank(d).map_or(need.input_tokens, |i| need.input_on(i)))
            .collect();
        if let Some(tenant) = need.tenant.as_mut() {
            let all = std::mem::take(&mut tenant.costs);
            tenant.costs = candidates
                .iter()
                .map(|&d| rank(d).and_then(|i| all.get(i).copied()).unwrap_or(0))
                .collect();
        }
        need
    }

    /// After an admission was granted, the next one (a failover, a retry) is a new reservation:
    /// it gets a new id, or the ledger would answer the earlier one while its slot lives.
    pub fn next_reservation(&mut self) {
        self.need = self.need.clone().with_new_id();
    }

    /// The estimate of candidate `d` (zero if it is not one).
    pub fn estimate_of(&self, d: DeploymentId) -> Estimate {
        self.ranked
            .iter()
            .position(|&r| r == d)
            .and_then(|i| self.estimates.get(i).copied())
            .unwrap_or_default()
    }

    /// The tenant's name, if the request is accounted to one.
    pub fn tenant(&self) -> Option<&str> {
        let specs = self.need.tenant.iter().flat_map(|t| &t.specs);
        let mut tenants = specs.filter(|spec| spec.scope() == Scope::Tenant);
        tenants.next().map(|spec| spec.name.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        let yaml = r#"
priorities: { batch_share: 0.25 }
providers:
  - name: cheap
    api: anthropic
    base_url: http://localhost
    api_key_env: A_KEY
    models:
      - { name: a, aliases: [chat], price: { input: 1.0, output: 1.0 } }
  - name: dear
    api: openai
    base_url: http://localhost/v1
    api_key_env: O_KEY
    models:
      - { name: o, aliases: [chat], price: { input: 1.1, output: 1.1 }, max_output_tokens: 2000 }
"#;
        Registry::from_yaml_str(yaml, "plan.yaml").unwrap()
    }

    fn ask(priority: Priority) -> Ask {
        Ask {
            prompt: PromptSize {
                chars: 40_000,
                images: 0,
            },
            max_tokens: Some(100),
            accounts: Vec::new(),
            priority,
            deadline: Duration::from_secs(30),
            cache_reads: Vec::new(),
            writes_cache: false,
        }
    }

    #[test]
    fn each_candidate_is_estimated_by_its_own_tokenizer() {
        let registry = registry();
        let outputs = Estimator::new(&registry);
        let all = [DeploymentId(0), DeploymentId(1)];
        let plan = Plan::new(&registry, &outputs, &all, ask(Priority::Interactive), 1_000);
        let anthropic = plan.estimate_of(DeploymentId(0));
        let openai = plan.estimate_of(DeploymentId(1));
        assert_eq!(openai.prompt_tokens, 10_000);
        assert!(
            anthropic.prompt_tokens > openai.prompt_tokens,
            "{anthropic:?} vs {openai:?}"
        );
        assert_eq!(anthropic.completion_tokens, 100);
        // Anthropic's tokenizer makes the cheaper list price the dearer request.
        assert_eq!(plan.ranked, [DeploymentId(1), DeploymentId(0)]);
        assert_eq!(plan.need.tokens, anthropic.counted());
        assert_eq!(plan.deadline_ms, 31_000);
    }

    #[test]
    fn expected_cache_reads_leave_itpm_and_price_at_the_cached_rate() {
        let yaml = r#"
providers:
  - name: an
    api: anthropic
    base_url: http://localhost
    api_key_env: A_KEY
    models:
      - { name: a, aliases: [chat], price: { input: 3.0, output: 15.0, cached_input: 0.1 } }
  - name: oa
    api: openai
    base_url: http://localhost/v1
    api_key_env: O_KEY
    models:
      - { name: o, aliases: [chat], price: { input: 1.0, output: 4.0 } }
"#;
        let registry = Registry::from_yaml_str(yaml, "plan.yaml").unwrap();
        let estimator = Estimator::new(&registry);
        let (anthropic, openai) = (DeploymentId(0), DeploymentId(1));
        let both = [anthropic, openai];
        let cold = Plan::new(&registry, &estimator, &both, ask(Priority::Interactive), 0);
        // Cold, Anthropic's list price loses.
        assert_eq!(cold.ranked, [openai, anthropic]);
        let full = cold.estimate_of(anthropic);
        assert_eq!(full.counted_prompt, full.prompt_tokens);
        // Warm: 10,000 of its ~12,000 prompt tokens come from the cache.
        let mut warm_ask = ask(Priority::Interactive);
        warm_ask.cache_reads = vec![(anthropic, 10_000), (openai, 10_000)];
        let warm = Plan::new(&registry, &estimator, &both, warm_ask, 0);
        let e = warm.estimate_of(anthropic);
        assert_eq!(e.cached_tokens, 10_000);
        assert_eq!(
            e.counted_prompt,
            full.prompt_tokens - 10_000,
            "ITPM leaves cache reads out"
        );
        assert_eq!(
            warm.ranked,
            [anthropic, openai],
            "cached tokens at the cached price"
        );
        // OpenAI's limiter counts the whole prompt, cached or not.
        let o = warm.estimate_of(openai);
        assert_eq!(o.counted_prompt, cold.estimate_of(openai).counted_prompt);
        // A recorded read larger than the prompt is cut to it.
        let mut huge = ask(Priority::Interactive);
        huge.cache_reads = vec![(anthropic, u64::MAX)];
        let plan = Plan::new(&registry, &estimator, &[anthropic], huge, 0);
        assert_eq!(plan.estimate_of(anthropic).counted_prompt, 0);
    }

    #[test]
    fn admission_reserves_what_the_limiter_counts_and_ranking_uses_the_expected_cost() {
        let registry = registry();
        let estimator = Estimator::new(&registry);
        let (anthropic, openai) = (DeploymentId(0), DeploymentId(1));
        // The OpenAI-compatible provider reported fewer prompt tokens than a quarter of the
        // characters, and short completions.
        for _ in 0..50 {
            estimator.record(
                openai,
                PromptSize {
                    chars: 40_000,
                    images: 0,
                },
                8_000,
                20,
            );
        }
        let mut ask = ask(Priority::Interactive);
        ask.max_tokens = Some(256);
        let plan = Plan::new(&registry, &estimator, &[anthropic, openai], ask.clone(), 0);
        let e = plan.estimate_of(openai);
        assert!((8_000..8_100).contains(&e.prompt_tokens), "{e:?}");
        assert_eq!(e.completion_tokens, 30, "1.5 x the recent average");
        // Its limiter counts a quarter of the characters and max_tokens when the request arrives.
        assert_eq!((e.counted_prompt, e.counted_output), (10_000, 256));
        let rank = plan.ranked.iter().position(|&d| d == openai).unwrap();
        assert_eq!(plan.need.tokens_on(rank), 10_256);
        assert_eq!(plan.need.input_on(rank), 10_000);
        // Anthropic counts the prompt as it tokenizes it.
        let a = plan.estimate_of(anthropic);
        assert_eq!((a.counted_prompt, a.counted_output), (a.prompt_tokens, 256));
        // With no max_tokens, the model's cap is counted.
        ask.max_tokens = None;
        let plan = Plan::new(&registry, &estimator, &[openai], ask, 0);
        assert_eq!(plan.estimate_of(openai).counted_output, 2_000);
        assert_eq!(plan.estimate_of(openai).completion_tokens, 30);
    }

    #[test]
    fn a_max_tokens_of_u64_max_is_counted_as_max_counted() {
        let registry = registry();
        let estimator = Estimator::new(&registry);
        let mut ask = ask(Priority::Interactive);
        ask.max_tokens = Some(u64::MAX);
        let d = DeploymentId(0);
        let plan = Plan::new(&registry, &estimator, &[d], ask, 0);
        let e = plan.estimate_of(d);
        assert_eq!(e.counted_output, MAX_COUNTED);
        assert_eq!(plan.need.tokens_on(0), e.counted_prompt + MAX_COUNTED);
        assert!(e.completion_tokens <= MAX_COUNTED);
    }

    #[test]
    fn an_admission_on_fewer_candidates_carries_their_own_tokens_and_costs() {
        let registry = registry();
        let outputs = Estimator::new(&registry);
        let all = [DeploymentId(0), DeploymentId(1)];
        let mut ask = ask(Priority::Interactive);
        ask.accounts = vec![TenantSpec {
            name: "acme".into(),
            limits: Default::default(),
            budget: Default::default(),
        }];
        let mut plan = Plan::new(&registry, &outputs, &all, ask, 0);
        assert_eq!(plan.ranked, [DeploymentId(1), DeploymentId(0)]);
        let full = plan.need_for(&plan.ranked.clone());
        let anthropic = plan.estimate_of(DeploymentId(0)).counted();
        assert_eq!(full.tokens_on(1), anthropic);
        let only = plan.need_for(&[DeploymentId(0)]);
        assert_eq!(only.tokens_on(0), anthropic);
        let prompt = plan.estimate_of(DeploymentId(0)).counted_prompt;
        assert_eq!(full.input_on(1), prompt);
        assert_eq!(
            only.input_on(0),
            prompt,
            "the input part follows its candidate"
        );
        assert_eq!(only.output_on(0), anthropic - prompt);
        assert_ne!(
            full.input_on(0),
            prompt,
            "the other candidate tokenizes apart"
        );
        let costs = |n: &Need| n.tenant.as_ref().map(|t| t.costs.clone()).unwrap();
        assert_eq!(costs(&only), [costs(&full)[1]]);
        let id = plan.need.id;
        plan.next_reservation();
        assert_ne!(plan.need.id, id);
    }

    #[test]
    fn batch_requests_get_their_share_and_tenants_their_cost_per_candidate() {
        let registry = registry();
        let outputs = Estimator::new(&registry);
        let all = [DeploymentId(0), DeploymentId(1)];
        let mut batch = ask(Priority::Batch);
        batch.accounts = vec![TenantSpec {
            name: "acme".into(),
            limits: Default::default(),
            budget: Default::default(),
        }];
        let plan = Plan::new(&registry, &outputs, &all, batch, 0);
        assert_eq!(plan.need.share_percent, 25);
        let costs = &plan.need.tenant.as_ref().unwrap().costs;
        assert_eq!(costs.len(), 2);
        let openai = registry.deployment(DeploymentId(1)).price.cost(10_000, 100);
        assert_eq!(costs[0], usd_to_micros(openai));
        assert!(costs[1] > costs[0]);
        assert_eq!(plan.tenant(), Some("acme"));
    }

    #[test]
    fn a_models_output_cap_bounds_its_expected_completion() {
        let yaml = r#"
priorities: { batch_share: 0.29 }
providers:
  - name: small
    api: openai
    base_url: http://localhost/v1
    api_key_env: S_KEY
    models:
      - { name: s, aliases: [chat], price: { input: 1.0, output: 2.0 }, max_output_tokens: 100 }
"#;
        let registry = Registry::from_yaml_str(yaml, "plan.yaml").unwrap();
        let estimator = Estimator::new(&registry);
        let mut ask = ask(Priority::Batch);
        ask.max_tokens = None;
        ask.deadline = Duration::MAX;
        let plan = Plan::new(&registry, &estimator, &[DeploymentId(0)], ask.clone(), 5);
        // Without the cap it would be the default guess, 512.
        let e = plan.estimate_of(DeploymentId(0));
        assert_eq!((e.completion_tokens, e.counted_output), (100, 100));
        // 0.29 x 100 is 28.999...: the share is 29 %, not 28.
        assert_eq!(plan.need.share_percent, 29);
        // A deadline beyond what milliseconds hold is the farthest one, not a wrapped one.
        assert_eq!(plan.deadline_ms, u64::MAX);
        // A share just under the whole still leaves something for interactive requests.
        let almost = yaml.replace("batch_share: 0.29", "batch_share: 0.998");
        let registry = Registry::from_yaml_str(&almost, "plan.yaml").unwrap();
        let plan = Plan::new(&registry, &estimator, &[DeploymentId(0)], ask.clone(), 5);
        assert_eq!(plan.need.share_percent, 99);
    }
}
