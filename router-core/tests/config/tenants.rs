//! `tenants:` and `priorities:`: tiers, members, budgets and the batch share.

use super::*;

/// `tenants:` and `priorities:` as in the documented example, appended to [`BASE`] by
/// [`with_tenants`]: `tenants:` is line 25, `free` 28, `pro` 29, `acme` 32, `batch_share` 34.
const TENANTS: &str = "tenants:
  default_tier: free
  tiers:
    free: { rpm: 60, tpm: 100000, concurrency: 2, budget: { daily_usd: 1, monthly_usd: 10 } }
    pro: { rpm: 500, tpm: 1000000, concurrency: 20, budget: { daily_usd: 50, monthly_usd: 500 } }
    enterprise: { rpm: 10000, tpm: 10000000 }
  members:
    acme: pro
priorities:
  batch_share: 0.8
";

/// `BASE` followed by `TENANTS` with `from` (which must occur exactly once) replaced by `to`.
fn with_tenants(from: &str, to: &str) -> String {
    assert_eq!(
        TENANTS.matches(from).count(),
        1,
        "fixture must contain {from:?} exactly once"
    );
    format!("{BASE}{}", TENANTS.replacen(from, to, 1))
}

#[test]
fn tiers_members_and_batch_share_are_read_and_tier_of_falls_back_to_the_default() {
    let yaml = with_tenants("batch_share: 0.8", "batch_share: 0.5");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let names: Vec<&str> = registry
        .tenants
        .tiers
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["free", "pro", "enterprise"], "configuration order");
    assert_eq!(registry.tenants.default_tier.as_deref(), Some("free"));
    assert_eq!(
        registry.tenants.members,
        [("acme".to_owned(), "pro".to_owned())]
    );

    let acme = registry.tier_of("acme").unwrap();
    assert_eq!(acme.name, "pro");
    assert_eq!(acme.limits.rpm.map(|n| n.get()), Some(500));
    assert_eq!(acme.limits.tpm.map(|n| n.get()), Some(1_000_000));
    assert_eq!(acme.limits.concurrency.map(|n| n.get()), Some(20));
    assert_eq!(
        acme.budget,
        Budget {
            daily_usd: Some(50.0),
            monthly_usd: Some(500.0)
        }
    );
    assert_eq!(registry.tier_of("unknown").unwrap().name, "free");
    let enterprise = registry.tenants.tier("enterprise").unwrap();
    assert_eq!(
        enterprise.limits.concurrency, None,
        "omitted limit is unlimited"
    );
    assert_eq!(
        enterprise.budget,
        Budget::default(),
        "omitted budget is unlimited"
    );
    assert_eq!(registry.priorities.batch_share, 0.5);

    let yaml = with_tenants("  default_tier: free\n", "");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    assert_eq!(registry.tier_of("acme").unwrap().name, "pro");
    assert_eq!(
        registry.tier_of("unknown"),
        None,
        "no default tier: untracked"
    );
}

#[test]
fn absent_or_empty_tenants_and_priorities_sections_take_their_defaults() {
    for extra in [
        "",
        "tenants:\npriorities:\n",
        "tenants: {}\npriorities: {}\n",
    ] {
        let yaml = format!("{BASE}{extra}");
        let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
        assert_eq!(registry.tenants, Tenants::default(), "for {extra:?}");
        assert_eq!(registry.priorities, Priorities::default());
        assert_eq!(registry.tier_of("acme"), None);
    }
}

#[test]
fn a_tier_written_with_nothing_after_it_is_unlimited() {
    let yaml = with_tenants(
        "    enterprise: { rpm: 10000, tpm: 10000000 }\n",
        "    enterprise:\n",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let enterprise = registry.tenants.tier("enterprise").unwrap();
    assert!(enterprise.limits.is_unlimited());
    assert_eq!(enterprise.budget, Budget::default());
}

#[test]
fn unknown_fields_in_tenants_and_priorities_are_reported_with_their_line() {
    let cases = [
        ("  tiers:", "  tierz:", "test.yaml:27:", "`tierz`", "tiers"),
        ("{ rpm: 60,", "{ rpn: 60,", "test.yaml:28:", "`rpn`", "rpm"),
        (
            "{ daily_usd: 1,",
            "{ weekly_usd: 1,",
            "test.yaml:28:",
            "`weekly_usd`",
            "daily_usd",
        ),
        (
            "enterprise: { rpm: 10000,",
            "enterprise: { limits: { rpm: 10000 },",
            "test.yaml:30:",
            "`limits`",
            "concurrency",
        ),
        (
            "batch_share:",
            "batch: ",
            "test.yaml:34:",
            "`batch`",
            "batch_share",
        ),
    ];
    for (from, to, at, unknown, expected) in cases {
        let msg = error_of(&with_tenants(from, to));
        assert_mentions(&msg, &[at, "unknown field", unknown, expected]);
    }
}

#[test]
fn zero_negative_nan_and_infinite_budgets_are_rejected() {
    let cases = [
        (
            "daily_usd: 1,",
            "daily_usd: 0,",
            28,
            "free.budget.daily_usd",
            "got 0",
            "daily",
        ),
        (
            "monthly_usd: 10 ",
            "monthly_usd: -10 ",
            28,
            "free.budget.monthly_usd",
            "got -10",
            "monthly",
        ),
        (
            "daily_usd: 50,",
            "daily_usd: .nan,",
            29,
            "pro.budget.daily_usd",
            "got NaN",
            "daily",
        ),
        (
            "monthly_usd: 500 ",
            "monthly_usd: .inf ",
            29,
            "pro.budget.monthly_usd",
            "got inf",
            "monthly",
        ),
        (
            "daily_usd: 50,",
            "daily_usd: lots,",
            29,
            "pro.budget.daily_usd",
            "got `lots`",
            "daily",
        ),
    ];
    for (from, to, line, field, got, period) in cases {
        let msg = error_of(&with_tenants(from, to));
        let at = format!("test.yaml:{line}:");
        let field = format!("tenants.tiers.{field}");
        let hint = format!("for no {period} budget");
        assert_mentions(
            &msg,
            &[&at, &field, got, "positive, finite amount in USD", &hint],
        );
    }
}

#[test]
fn a_daily_budget_above_the_monthly_one_is_allowed() {
    let yaml = with_tenants("daily_usd: 1,", "daily_usd: 20,");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let free = registry.tenants.tier("free").unwrap();
    assert_eq!(
        free.budget,
        Budget {
            daily_usd: Some(20.0),
            monthly_usd: Some(10.0)
        }
    );
}

#[test]
fn zero_negative_and_fractional_tier_limits_name_the_field() {
    let cases = [
        (
            "{ rpm: 60,",
            "{ rpm: 0,",
            28,
            "tenants.tiers.free.rpm",
            "got 0",
            "rpm",
        ),
        (
            "tpm: 1000000,",
            "tpm: -1,",
            29,
            "tenants.tiers.pro.tpm",
            "got -1",
            "tpm",
        ),
        (
            "concurrency: 2,",
            "concurrency: 0,",
            28,
            "tenants.tiers.free.concurrency",
            "got 0",
            "concurrency",
        ),
        (
            "tpm: 10000000 ",
            "tpm: 1.5 ",
            30,
            "tenants.tiers.enterprise.tpm",
            "got 1.5",
            "tpm",
        ),
    ];
    for (from, to, line, field, got, key) in cases {
        let msg = error_of(&with_tenants(from, to));
        let at = format!("test.yaml:{line}:");
        let hint = format!("remove `{key}` for no limit");
        assert_mentions(&msg, &[&at, field, got, "whole number above zero", &hint]);
    }
}

#[test]
fn a_default_tier_naming_no_tier_lists_the_tiers() {
    let msg = error_of(&with_tenants("default_tier: free", "default_tier: gold"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:26:",
            "tenants.default_tier",
            "`gold` names no tier",
            "use one of: free, pro, enterprise",
        ],
    );
}

#[test]
fn a_member_of_an_unknown_tier_lists_the_tiers() {
    let msg = error_of(&with_tenants("acme: pro", "acme: gold"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:32:",
            "tenants.members.acme",
            "`gold` names no tier",
            "use one of: free, pro, enterprise",
        ],
    );
    let msg = error_of(&format!("{BASE}tenants:\n  members:\n    acme: pro\n"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:27:",
            "tenants.members.acme",
            "`pro` names no tier",
            "add it under `tenants.tiers`",
        ],
    );
}

#[test]
fn duplicate_tier_and_tenant_names_are_rejected_with_their_line() {
    // Written twice: the parser says so.
    let msg = error_of(&with_tenants(
        "    acme: pro\n",
        "    acme: pro\n    acme: free\n",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:33:",
            "duplicate mapping key",
            "acme",
            "remove one",
        ],
    );
    let msg = error_of(&with_tenants(
        "    enterprise: {",
        "    pro: { rpm: 1 }\n    enterprise: {",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:30:",
            "duplicate mapping key",
            "pro",
            "remove one",
        ],
    );
    // Written differently, the same name: validation says so.
    let msg = error_of(&with_tenants(
        "    acme: pro\n",
        "    1: pro\n    \"1\": free\n",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:33:",
            "tenants.members[1]",
            "duplicate tenant `1`",
            "first at line 32",
        ],
    );
    let msg = error_of(&with_tenants(
        "    enterprise: {",
        "    7: {}\n    \"7\": {}\n    enterprise: {",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:31:",
            "tenants.tiers[3]",
            "duplicate tier `7`",
            "first at line 30",
        ],
    );
}

#[test]
fn batch_share_must_be_above_zero_and_at_most_one() {
    for bad in ["0", "-0.5", "1.5", ".nan", ".inf", "lots", "true"] {
        let msg = error_of(&with_tenants(
            "batch_share: 0.8",
            &format!("batch_share: {bad}"),
        ));
        assert_mentions(
            &msg,
            &[
                "test.yaml:34:",
                "priorities.batch_share",
                "above 0 and at most 1",
                "got ",
                "default 0.8",
            ],
        );
    }
    for (good, share) in [("1", 1.0), ("1.0", 1.0), ("0.05", 0.05)] {
        let yaml = with_tenants("batch_share: 0.8", &format!("batch_share: {good}"));
        let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
        assert_eq!(registry.priorities.batch_share, share, "for {good}");
    }
}

#[test]
fn batch_aging_secs_is_read_and_must_be_seconds_up_to_an_hour() {
    let with_aging = |v: &str| {
        with_tenants(
            "batch_share: 0.8",
            &format!("batch_share: 0.8\n  batch_aging_secs: {v}"),
        )
    };
    for bad in ["-1", "3601", ".nan", "soon"] {
        let msg = error_of(&with_aging(bad));
        assert_mentions(
            &msg,
            &[
                "test.yaml:35:",
                "priorities.batch_aging_secs",
                "from 0 to 3600",
                "default 30",
            ],
        );
    }
    for (good, ms) in [("0", 0), ("2.5", 2_500), ("3600", 3_600_000)] {
        let registry = Registry::from_yaml_str(&with_aging(good), "test.yaml").unwrap();
        assert_eq!(
            registry.priorities.batch_aging.as_millis(),
            ms,
            "for {good}"
        );
    }
    let unchanged = with_tenants("batch_share: 0.8", "batch_share: 0.8");
    let registry = Registry::from_yaml_str(&unchanged, "test.yaml").unwrap();
    assert_eq!(registry.priorities.batch_aging.as_secs(), 30, "the default");
}

#[test]
fn tenant_names_must_be_non_empty_and_fit_in_the_namespace_hash_tag() {
    let cases = [
        ("\"\"", "tenant name must not be empty"),
        ("\"a{b}\"", "`a{b}` must not contain `{` or `}`"),
        ("\"x}\"", "hash tag"),
        ("\" acme\"", "leading or trailing spaces"),
    ];
    for (name, expected) in cases {
        let msg = error_of(&with_tenants("    acme: pro", &format!("    {name}: pro")));
        assert_mentions(&msg, &["test.yaml:32:", "tenants.members[0]", expected]);
    }
    let msg = error_of(&with_tenants("    free: {", "    \"\": {"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:28:",
            "tenants.tiers[0]",
            "tier name must not be empty",
        ],
    );
}

#[test]
fn the_example_providers_yaml_has_tiers_members_and_batch_share() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../providers.yaml");
    let registry = Registry::from_path(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(registry.tier_of("acme").unwrap().name, "pro");
    assert_eq!(registry.tier_of("someone-else").unwrap().name, "free");
    assert_eq!(registry.priorities, Priorities::default());
}

#[test]
fn a_tier_leases_with_auto_and_not_with_concurrency_or_a_block() {
    let yaml = with_tenants(
        "enterprise: { rpm: 10000, tpm: 10000000 }",
        "enterprise: { rpm: 10000, tpm: 10000000, lease: auto }",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let leases: Vec<bool> = registry.tenants.tiers.iter().map(|t| t.lease).collect();
    assert_eq!(leases, [false, false, true]);
    let cases = [
        (
            "concurrency: 20",
            "lease: auto, concurrency: 20",
            "holds no slots",
        ),
        (
            "tpm: 10000000 }",
            "tpm: 10000000, lease: often }",
            "`often` is not a tier's lease",
        ),
        (
            "tpm: 10000000 }",
            "tpm: 10000000, lease: { requests: 5 } }",
            "write `lease: auto`",
        ),
    ];
    for (from, to, says) in cases {
        let err = Registry::from_yaml_str(&with_tenants(from, to), "test.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lease") && err.contains(says), "{to}: {err}");
    }
}
