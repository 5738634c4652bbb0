//! Selection: which deployments to try, in which order. A pure function, no I/O.
//!
//! Candidates are ranked by the estimated cost of *this* request (prompt tokens at the input
//! price plus estimated completion tokens at the output price); ties keep configuration order.
//! The ledger then reserves on the first candidate that has room (DESIGN.md invariant I3).

use crate::config::{DeploymentId, Registry};

/// A candidate with its estimated cost for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    /// The deployment.
    pub deployment: DeploymentId,
    /// Estimated cost of the request on this deployment, in USD.
    pub cost_usd: f64,
}

/// `candidates` ordered cheapest first for a request of `input` prompt tokens and `output`
/// estimated completion tokens; equal costs keep configuration order.
pub fn rank(
    registry: &Registry,
    candidates: &[DeploymentId],
    input: u64,
    output: u64,
) -> Vec<Ranked> {
    rank_by(registry, candidates, |_| (input, output))
}

/// `candidates` ordered cheapest first when each has its own estimate: `estimate(d)` gives
/// `(prompt tokens, completion tokens)` on `d` (providers' tokenizers and histories differ);
/// equal costs keep configuration order.
pub fn rank_by(
    registry: &Registry,
    candidates: &[DeploymentId],
    estimate: impl Fn(DeploymentId) -> (u64, u64),
) -> Vec<Ranked> {
    rank_by_cost(candidates, |d| {
        let (input, output) = estimate(d);
        registry.deployment(d).price.cost(input, output)
    })
}

/// `candidates` ordered cheapest first by `cost(d)`, the request's estimated cost on `d` in
/// USD; equal costs keep configuration order.
pub fn rank_by_cost(
    candidates: &[DeploymentId],
    cost: impl Fn(DeploymentId) -> f64,
) -> Vec<Ranked> {
    let mut ranked: Vec<Ranked> = candidates
        .iter()
        .map(|&deployment| Ranked {
            deployment,
            cost_usd: cost(deployment),
        })
        .collect();
    ranked.sort_by(|a, b| {
        a.cost_usd
            .total_cmp(&b.cost_usd)
            .then(a.deployment.cmp(&b.deployment))
    });
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        let yaml = r#"
providers:
  - name: p
    api: openai
    base_url: http://localhost/v1
    api_key_env: P_KEY
    models:
      - { name: in-cheap,  aliases: [chat], price: { input: 0.10, output: 10.0 } }
      - { name: out-cheap, aliases: [chat], price: { input: 5.00, output: 0.50 } }
      - { name: twin-a,    aliases: [chat], price: { input: 1.00, output: 1.00 } }
      - { name: twin-b,    aliases: [chat], price: { input: 1.00, output: 1.00 } }
"#;
        Registry::from_yaml_str(yaml, "select.yaml").expect("valid test config")
    }

    fn names(r: &Registry, ranked: &[Ranked]) -> Vec<String> {
        ranked
            .iter()
            .map(|c| r.deployment(c.deployment).model.clone())
            .collect()
    }

    #[test]
    fn the_order_depends_on_the_shape_of_the_request() {
        let r = registry();
        let all = r.resolve("chat");
        let table = [
            // (prompt, completion) -> cheapest first
            ((10_000, 10), ["in-cheap", "twin-a", "twin-b", "out-cheap"]),
            ((10, 10_000), ["out-cheap", "twin-a", "twin-b", "in-cheap"]),
            (
                (1_000, 1_000),
                ["twin-a", "twin-b", "out-cheap", "in-cheap"],
            ),
        ];
        for ((input, output), want) in table {
            assert_eq!(
                names(&r, &rank(&r, &all, input, output)),
                want,
                "{input}/{output}"
            );
        }
    }

    #[test]
    fn ties_keep_configuration_order_whatever_the_input_order() {
        let r = registry();
        let mut reversed = r.resolve("chat");
        reversed.reverse();
        let ranked = rank(&r, &reversed, 100, 100);
        let twins: Vec<_> = names(&r, &ranked)
            .into_iter()
            .filter(|n| n.starts_with("twin"))
            .collect();
        assert_eq!(twins, ["twin-a", "twin-b"]);
    }

    #[test]
    fn costs_are_in_usd_per_million_tokens() {
        let r = registry();
        let ranked = rank(&r, &r.resolve("twin-a"), 500_000, 250_000);
        assert!((ranked[0].cost_usd - 0.75).abs() < 1e-12);
    }
}
