//! `llmroute simulate`'s engine: deterministic for a seed, totals that add up, and the ledger
//! keeping simulated providers inside their limits.

use router_core::config::Registry;
use router_sim::{self as sim, Profile, SimReport};

/// Three deployments of `chat`, cheapest first: `cheap/small` (OpenAI-compatible: it reports
/// what remains in rate-limit headers) with `cheap_limits`, then `mid/medium` (Anthropic: its
/// tokenizer counts 1.2x) and `dear/large` (Gemini: no headers).
fn registry(cheap_limits: &str) -> Registry {
    registry_with("openai", cheap_limits)
}

/// The same, with `cheap` speaking `cheap_api`.
fn registry_with(cheap_api: &str, cheap_limits: &str) -> Registry {
    let yaml = registry_yaml(cheap_api, cheap_limits);
    Registry::from_yaml_str(&yaml, "sim.yaml").expect("valid test config")
}

/// The YAML of [`registry_with`].
fn registry_yaml(cheap_api: &str, cheap_limits: &str) -> String {
    format!(
        r#"
defaults: {{ model: chat, output_tokens: 300 }}
retry: {{ max_attempts: 4, base_ms: 250, cap_ms: 30000, deadline_secs: 120 }}
providers:
  - name: cheap
    api: {cheap_api}
    base_url: http://localhost/v1
    api_key_env: CHEAP_KEY
    models:
      - name: small
        aliases: [chat]
        price: {{ input: 0.10, output: 0.40 }}
        limits: {cheap_limits}
  - name: mid
    api: anthropic
    base_url: http://localhost
    api_key_env: MID_KEY
    limits: {{ concurrency: 200 }}
    models:
      - name: medium
        aliases: [chat]
        price: {{ input: 1.00, output: 5.00 }}
        limits: {{ rpm: 2000, tpm: 4000000 }}
  - name: dear
    api: gemini
    base_url: http://localhost
    api_key_env: DEAR_KEY
    models:
      - {{ name: large, aliases: [chat], price: {{ input: 3.00, output: 15.00 }} }}
"#
    )
}

fn profile(rps: f64, duration_secs: u64) -> Profile {
    Profile {
        rps,
        duration_secs,
        ..Profile::default()
    }
}

fn run(registry: &Registry, profile: &Profile) -> SimReport {
    sim::run(registry, profile).expect("the simulation runs")
}

/// `name` of the report's deployment `i`, and what it served.
fn served(report: &SimReport, name: &str) -> u64 {
    report
        .deployments
        .iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("no deployment {name} in {:#?}", report.deployments))
        .requests
}

fn assert_adds_up(r: &SimReport) {
    let t = &r.totals;
    let sum = |f: fn(&sim::DeploymentReport) -> u64| r.deployments.iter().map(f).sum::<u64>();
    assert_eq!(t.served + t.failed, t.requests, "{t:#?}");
    assert_eq!(
        t.failed,
        t.failed_no_capacity + t.failed_retries + t.failed_timeout
    );
    assert_eq!(t.served, sum(|d| d.requests));
    assert_eq!(t.prompt_tokens, sum(|d| d.prompt_tokens));
    assert_eq!(t.completion_tokens, sum(|d| d.completion_tokens));
    assert_eq!(t.rate_limited, sum(|d| d.rate_limited));
    assert_eq!(t.timeouts, sum(|d| d.timeouts));
    assert_eq!(t.waits, sum(|d| d.waits));
    assert_eq!(t.wait_ms, sum(|d| d.wait_ms));
    let cost: f64 = r.deployments.iter().map(|d| d.cost_usd).sum();
    assert!(
        (t.cost_usd - cost).abs() <= 1e-9 * cost.max(1.0),
        "{} vs {cost}",
        t.cost_usd
    );
    let b = &r.baselines;
    assert!(
        b.cheapest.cost_usd <= t.cost_usd + 1e-9,
        "{b:#?} vs {}",
        t.cost_usd
    );
    assert!(
        t.cost_usd <= b.most_expensive.cost_usd + 1e-9,
        "{b:#?} vs {}",
        t.cost_usd
    );
    assert!((b.savings_usd - (b.most_expensive.cost_usd - t.cost_usd)).abs() < 1e-9);
    assert_minutes_add_up(r);
}

/// Each deployment's per-minute series adds up to its row of the report, and every series
/// spans the whole run.
fn assert_minutes_add_up(r: &SimReport) {
    assert_eq!(r.per_minute.len(), r.deployments.len());
    let minutes = r.simulated_ms.div_ceil(60_000).max(1) as usize;
    for (d, series) in r.deployments.iter().zip(&r.per_minute) {
        assert_eq!(series.name, d.name);
        assert!(
            series.minutes.len() >= minutes,
            "{} minutes",
            series.minutes.len()
        );
        assert!(
            series.minutes.len() <= minutes + 1,
            "{} minutes",
            series.minutes.len()
        );
        let sum = |f: fn(&sim::Minute) -> u64| series.minutes.iter().map(f).sum::<u64>();
        assert_eq!(sum(|m| m.requests), d.requests, "{}", d.name);
        assert_eq!(sum(|m| m.prompt_tokens), d.prompt_tokens, "{}", d.name);
        assert_eq!(
            sum(|m| m.completion_tokens),
            d.completion_tokens,
            "{}",
            d.name
        );
        assert_eq!(sum(|m| m.rate_limited), d.rate_limited, "{}", d.name);
        let peak = d.peak.tpm.unwrap_or(0);
        assert!(sum(|m| m.counted_tokens) >= peak, "{}", d.name);
    }
}

#[test]
fn the_per_minute_series_adds_up_to_the_report_and_shows_the_overflow() {
    let registry = registry("{ rpm: 300 }");
    let r = run(&registry, &profile(20.0, 300));
    assert_minutes_add_up(&r);
    let total: u64 = r
        .per_minute
        .iter()
        .flat_map(|s| &s.minutes)
        .map(|m| m.requests)
        .sum();
    assert_eq!(total, r.totals.served);
    // The cheapest deployment is listed first and, at 1,200 requests a minute against its 300,
    // serves about 300 in each full minute while the rest overflow.
    let cheap = &r.per_minute[0];
    assert_eq!(cheap.name, "cheap/small");
    let busiest = cheap.minutes.iter().map(|m| m.requests).max().unwrap_or(0);
    assert!((250..=300).contains(&busiest), "{busiest}");
    let others: u64 = r.per_minute[1..]
        .iter()
        .flat_map(|s| &s.minutes)
        .map(|m| m.requests)
        .sum();
    assert!(others > 2_000, "{others}");
}

#[test]
fn totals_add_up_under_overflow_bursts_and_foreign_load() {
    let registry = registry("{ rpm: 300, tpm: 400000, concurrency: 20 }");
    for (burstiness, foreign_load) in [(0.0, 0.0), (3.0, 0.0), (0.0, 0.3), (3.0, 0.5)] {
        let p = Profile {
            burstiness,
            foreign_load,
            ..profile(15.0, 600)
        };
        let r = run(&registry, &p);
        assert!(r.totals.requests > 8000, "{:#?}", r.totals);
        assert_adds_up(&r);
    }
}

#[test]
fn the_same_seed_gives_the_same_report_and_another_seed_another() {
    let registry = registry("{ rpm: 300, tpm: 400000 }");
    let p = Profile {
        burstiness: 2.0,
        foreign_load: 0.2,
        ..profile(10.0, 300)
    };
    let a = run(&registry, &p);
    assert_eq!(a, run(&registry, &p));
    let b = run(&registry, &Profile { seed: 2, ..p });
    assert_ne!(a.totals, b.totals);
}

#[test]
fn with_room_for_everything_all_traffic_goes_to_the_cheapest() {
    let registry = registry("{ rpm: 100000, tpm: 100000000 }");
    let r = run(&registry, &profile(20.0, 600));
    assert_adds_up(&r);
    assert_eq!(r.deployments[0].name, "cheap/small");
    assert_eq!(served(&r, "cheap/small"), r.totals.requests);
    assert_eq!(r.totals.failed, 0);
    assert_eq!(r.totals.rate_limited, 0);
    assert_eq!(r.totals.waits, 0);
    assert_eq!(r.baselines.cheapest.deployment, "cheap/small");
    assert_eq!(r.baselines.most_expensive.deployment, "dear/large");
    assert!((r.baselines.cheapest.cost_usd - r.totals.cost_usd).abs() < 1e-9);
    assert!(r.baselines.savings_pct > 90.0, "{:#?}", r.baselines);
}

#[test]
fn overflow_goes_to_the_next_cheapest_and_the_ledger_keeps_providers_happy() {
    // Each tight limit in turn, 10 rps against it: the provider enforces exactly the configured
    // limits and sees only llmroute's traffic, so a 429 would mean the ledger over-admitted.
    for limits in [
        "{ rpm: 300 }",
        "{ tpm: 300000 }",
        "{ concurrency: 10 }",
        "{ rpm: 400, tpm: 500000, concurrency: 15 }",
    ] {
        let registry = registry(limits);
        for burstiness in [0.0, 4.0] {
            let p = Profile {
                burstiness,
                ..profile(10.0, 900)
            };
            let r = run(&registry, &p);
            assert_adds_up(&r);
            let (cheap, mid) = (&r.deployments[0], &r.deployments[1]);
            assert_eq!(
                (cheap.name.as_str(), mid.name.as_str()),
                ("cheap/small", "mid/medium")
            );
            // Requests and slots are counted exactly, and tokens as these (OpenAI-compatible)
            // providers count them on arrival (a quarter of the characters plus max_tokens):
            // any 429 would mean the ledger over-admitted.
            assert_eq!(r.totals.rate_limited, 0, "{limits} b={burstiness}: {r:#?}");
            assert_eq!(
                r.totals.failed, 0,
                "{limits} b={burstiness}: {:#?}",
                r.totals
            );
            assert!(cheap.requests > 0 && mid.requests > 0, "{limits}: {r:#?}");
            if burstiness == 0.0 {
                assert_eq!(served(&r, "dear/large"), 0, "{limits}: {r:#?}");
            }
            let within = |peak: Option<u64>, limit: Option<u64>| {
                limit.is_none_or(|l| peak.is_some_and(|p| p <= l))
            };
            assert!(within(cheap.peak.rpm, cheap.limits.rpm), "{cheap:#?}");
            assert!(within(cheap.peak.tpm, cheap.limits.tpm), "{cheap:#?}");
            assert!(
                within(cheap.peak.concurrency, cheap.limits.concurrency),
                "{cheap:#?}"
            );
        }
    }
}

#[test]
fn foreign_load_causes_429s_that_failover_absorbs() {
    // Gemini sends no rate-limit headers: the ledger learns of the other traffic only from 429s.
    let registry = registry_with("gemini", "{ rpm: 300, tpm: 400000 }");
    let p = Profile {
        foreign_load: 0.4,
        ..profile(10.0, 900)
    };
    let r = run(&registry, &p);
    assert_adds_up(&r);
    let cheap = &r.deployments[0];
    assert!(cheap.rate_limited > 0, "{r:#?}");
    // The provider enforced 60% of 300 rpm, and every refused request failed over and was served.
    assert!(cheap.peak.rpm <= Some(180), "{cheap:#?}");
    assert_eq!(r.totals.failed, 0, "{:#?}", r.totals);
    assert!(served(&r, "mid/medium") > 0);
}

#[test]
fn rate_limit_headers_let_the_ledger_follow_a_busier_provider() {
    let p = Profile {
        foreign_load: 0.4,
        ..profile(10.0, 900)
    };
    let blind = run(&registry_with("gemini", "{ rpm: 300 }"), &p);
    let told = run(&registry_with("openai", "{ rpm: 300 }"), &p);
    assert_adds_up(&told);
    assert!(
        told.totals.rate_limited < blind.totals.rate_limited,
        "with headers {:#?}\nwithout {:#?}",
        told.totals,
        blind.totals
    );
    assert!(told.deployments[0].peak.rpm <= Some(180));
}

#[test]
fn a_stricter_provider_than_configured_is_what_429s_look_like() {
    let registry = registry_with("gemini", "{ rpm: 300 }");
    let strict = Profile {
        provider_headroom: 0.5,
        ..profile(10.0, 600)
    };
    let r = run(&registry, &strict);
    assert_adds_up(&r);
    assert!(r.totals.rate_limited > 0, "{:#?}", r.totals);
    assert!(
        r.deployments[0].peak.rpm <= Some(150),
        "{:#?}",
        r.deployments[0]
    );
}

#[test]
fn overloaded_deployments_fail_requests_each_way_and_the_totals_still_add_up() {
    let yaml = r#"
defaults: { model: chat }
retry: { max_attempts: 3, deadline_secs: 30 }
providers:
  - name: only
    api: gemini
    base_url: http://localhost
    api_key_env: ONLY_KEY
    models:
      - { name: one, aliases: [chat], price: { input: 1, output: 2 }, limits: { rpm: 120 } }
  - name: other
    api: gemini
    base_url: http://localhost
    api_key_env: OTHER_KEY
    models:
      - { name: two, aliases: [chat], price: { input: 2, output: 4 }, limits: { rpm: 120 } }
"#;
    let registry = Registry::from_yaml_str(yaml, "two.yaml").expect("valid test config");
    // Twice what the limits take, a provider busier than configured, slow answers...
    let slow = Profile {
        foreign_load: 0.5,
        latency: sim::Latency {
            base_ms: 500,
            per_token_ms: 60.0,
        },
        ..profile(8.0, 600)
    };
    // ... or quick ones from a provider far stricter than configured.
    let strict = Profile {
        provider_headroom: 0.1,
        ..profile(8.0, 600)
    };
    let reports = [run(&registry, &slow), run(&registry, &strict)];
    for r in &reports {
        assert_adds_up(r);
        assert!(
            r.totals.served > 0 && r.totals.failed > 0,
            "{:#?}",
            r.totals
        );
    }
    let any = |f: fn(&sim::Totals) -> u64| reports.iter().map(|r| f(&r.totals)).sum::<u64>() > 0;
    assert!(any(|t| t.failed_no_capacity), "{reports:#?}");
    assert!(any(|t| t.failed_retries), "{reports:#?}");
    assert!(any(|t| t.failed_timeout), "{reports:#?}");
    assert!(any(|t| t.wait_ms), "{reports:#?}");
}

#[test]
fn errors_name_the_problem() {
    let registry = registry("{ rpm: 300 }");
    let unknown = Profile {
        model: Some("nope".into()),
        ..Profile::default()
    };
    let err = sim::run(&registry, &unknown).expect_err("unknown model");
    assert!(err.to_string().contains("nope"), "{err}");
    let bad = Profile {
        rps: 0.0,
        ..Profile::default()
    };
    let err = sim::run(&registry, &bad).expect_err("zero rps");
    assert!(err.to_string().contains("rps"), "{err}");
}

/// Not a correctness test: prints how long an hour of traffic takes on the example
/// configuration (`cargo test -p router-core --test sim -- --nocapture an_hour`).
#[test]
fn an_hour_at_20_rps_on_the_example_configuration() {
    let registry = Registry::from_yaml_str(include_str!("../../providers.yaml"), "providers.yaml")
        .expect("the example configuration is valid");
    // 40 rps is the main job's mean rate, about what the example configuration can serve when
    // providers count `max_tokens` (1024) on arrival; far above it, waiting requests re-ask the
    // ledger whenever capacity may have returned, and a debug build takes minutes.
    for rps in [20.0, 40.0] {
        let started = std::time::Instant::now();
        let r = run(&registry, &profile(rps, 3600));
        let took = started.elapsed();
        assert_adds_up(&r);
        println!(
            "{rps} rps x 3600 s: {} requests simulated in {took:.2?} ({} served, {} 429s, {} waits)",
            r.totals.requests, r.totals.served, r.totals.rate_limited, r.totals.waits
        );
    }
}

/// The test registry with a routed alias `auto`: prompts under 1,000 tokens to `small`, the
/// rest to `large`.
fn routed() -> Registry {
    let yaml = format!(
        "{}routes:\n  auto:\n    - when: {{ prompt_tokens: {{ below: 1000 }} }}\n      model: small\n    - model: large\n",
        registry_yaml("openai", "{ rpm: 100000 }")
    );
    Registry::from_yaml_str(&yaml, "sim.yaml").expect("valid routed config")
}

#[test]
fn a_routed_alias_routes_each_simulated_request_by_its_size() {
    let registry = routed();
    let mut p = profile(5.0, 120);
    p.model = Some("auto".into());
    // Prompts spread around 1,000 tokens: some below the rule's bound, some above.
    p.prompt = sim::TokenSize {
        mean: 1000,
        spread: 0.5,
    };
    let r = run(&registry, &p);
    assert_adds_up(&r);
    let (small, large) = (served(&r, "cheap/small"), served(&r, "dear/large"));
    assert!(small > 0 && large > 0, "{small} small, {large} large");
    assert_eq!(
        small + large,
        r.totals.served,
        "medium is never a rule's model"
    );

    // A route that matches nothing for some requests is an error naming it.
    let yaml = format!(
        "{}routes:\n  auto:\n    - when: {{ prompt_tokens: {{ below: 1000 }} }}\n      model: small\n",
        registry_yaml("openai", "{ rpm: 100000 }")
    );
    let partial = Registry::from_yaml_str(&yaml, "sim.yaml").expect("valid config");
    let err = sim::run(&partial, &p).expect_err("a request above 1,000 tokens has no route");
    assert!(
        err.to_string().contains("no rule of route `auto` matches"),
        "{err}"
    );
}

#[test]
fn a_per_day_limit_sends_the_rest_of_the_day_elsewhere_until_midnight() {
    // The simulation starts at 2023-11-14T22:13:20Z, 6,400 s before UTC midnight.
    let registry = registry("{ rpm: 100000, tpm: 100000000, rpd: 500 }");
    let r = run(&registry, &profile(10.0, 600));
    assert_adds_up(&r);
    assert_eq!(served(&r, "cheap/small"), 500, "{r:#?}");
    assert_eq!((r.totals.failed, r.totals.rate_limited), (0, 0));
    assert_eq!(served(&r, "mid/medium"), r.totals.requests - 500);
    // Across midnight a new day opens: 500 more, no sooner.
    let r = run(&registry, &profile(1.0, 7_200));
    assert_adds_up(&r);
    assert_eq!(served(&r, "cheap/small"), 1_000, "{r:#?}");
}

/// One deployment holding 10 calls of 3.5 s at a time (2.86 requests a second), interactive
/// traffic at about 90 % of that, steady, and 6 % of the requests batch ones: with
/// `batch_aging_secs: 30` no batch request waits much longer than 30 s (the calls ahead of it
/// drain within a few seconds); with a handicap of an hour, batch requests wait for every
/// interactive one and some wait minutes.
#[test]
fn batch_requests_wait_about_their_handicap_under_interactive_load_at_90_percent() {
    let waits = |aging: u64| {
        let yaml = format!(
            "defaults: {{ model: chat, output_tokens: 300 }}\n\
             retry: {{ deadline_secs: 600 }}\n\
             priorities: {{ batch_aging_secs: {aging} }}\n\
             providers:\n  - name: solo\n    api: openai\n    base_url: http://localhost/v1\n    \
             api_key_env: SOLO_KEY\n    models:\n      - {{ name: m, aliases: [chat], price: \
             {{ input: 1, output: 1 }}, limits: {{ concurrency: 10 }} }}\n"
        );
        let registry = Registry::from_yaml_str(&yaml, "sim.yaml").expect("valid test config");
        let profile = Profile {
            rps: 2.75,
            duration_secs: 1800,
            batch_share: 0.06,
            output: sim::TokenSize {
                mean: 300,
                spread: 0.0,
            },
            max_tokens: Some(300),
            seed: 3,
            ..Profile::default()
        };
        let report = run(&registry, &profile);
        assert_adds_up(&report);
        let class = |name: &str| {
            report
                .totals
                .waits_by_class
                .iter()
                .find(|c| c.class == name)
                .cloned()
                .unwrap_or_else(|| panic!("no {name} waits in {:#?}", report.totals))
        };
        (class("interactive"), class("batch"))
    };
    let (interactive, batch) = waits(30);
    assert!(batch.requests > 200 && interactive.requests > 4000);
    assert!(
        batch.max_ms <= 50_000,
        "a batch request waited {} ms with a 30 s handicap",
        batch.max_ms
    );
    let (strict_interactive, strict_batch) = waits(3600);
    assert!(
        strict_batch.max_ms > 3 * batch.max_ms,
        "an hour's handicap: batch waited at most {} ms, against {} ms",
        strict_batch.max_ms,
        batch.max_ms
    );
    // What the bound costs interactive requests: they wait longer behind aged batch ones.
    assert!(strict_interactive.p95_ms <= interactive.p95_ms);
}
