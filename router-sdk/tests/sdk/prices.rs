//! Cost exactly as providers bill it: Anthropic's cache writes (five minutes and an hour) at
//! their prices, and a long prompt billed and ranked at its model's upper band, the same in the
//! receipt, the usage record and the tenant's spend.

use std::time::Duration;

use router_core::config::{UsageSettings, UsageSink};
use router_sdk::{ChatRequest, Usage};
use router_state::store::Environment;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// Usage records in an SQLite file of `dir`, written within a millisecond.
fn recorder(dir: &std::path::Path) -> router_usage::Recorder {
    let mut settings = UsageSettings::with_sink(UsageSink::Sqlite(Some(dir.join("u.sqlite"))));
    settings.spill = Some(dir.join("u.spill"));
    settings.flush = Duration::from_millis(1);
    let env = Environment::fixed::<&str>(&[], None);
    router_state::usage::open(&settings, &env).unwrap().unwrap()
}

/// The cost of the one usage record written, micro-USD.
async fn recorded(rec: &router_usage::Recorder) -> u64 {
    rec.flush().await;
    let records = rec.sink().recent(10).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    records[0].cost_micros
}

fn for_acme(prompt: String) -> ChatRequest {
    ChatRequest {
        tenant: Some("acme".into()),
        max_tokens: Some(1_000),
        ..ChatRequest::new(prompt)
    }
}

#[tokio::test]
async fn cache_writes_cost_what_anthropic_bills_in_the_receipt_the_record_and_the_spend() {
    let dir = tempfile::tempdir().unwrap();
    let rec = recorder(dir.path());
    // Claude Sonnet 4.5's list price, $3 / $15 per million; the cache prices are Anthropic's
    // multiples of the input price, left to llmroute's defaults.
    let up = Upstream::anthropic("an", (3.0, 15.0));
    let w = World::recorded(&[up], SPENDER, rec.clone()).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/cache_writes.json"))
        .mount(&w.servers[0])
        .await;
    let answer = w
        .router
        .chat(for_acme("Where is the renewal clause?".into()))
        .await;
    let receipt = answer.unwrap().receipt;
    let usage = Usage {
        cached_prompt_tokens: 500,
        cache_write_tokens: 3_000,
        cache_write_1h_tokens: 2_000,
        ..Usage::new(3_550, 200)
    };
    assert_eq!(receipt.usage, usage);
    // Anthropic's price page: base input $3, 5-minute writes $3.75, 1-hour writes $6, cache
    // hits $0.30, output $15 per million tokens.
    let micros = 50 * 3 + 1_000 * 15 / 4 + 2_000 * 6 + 500 * 3 / 10 + 200 * 15;
    assert_eq!(micros, 19_050);
    assert_eq!((receipt.cost_usd * 1e6).round() as u64, micros);
    assert_eq!(recorded(&rec).await, micros, "the usage record");
    assert_eq!(spender_spent(&w).await, micros, "the tenant's spend");
}

/// A provider's price with a band above 200k prompt tokens, as Claude's 1M-token context
/// bills: $6 / $22.50 per million for the whole request.
const BANDED: &str = "price: { input: 3, output: 15, above: [{ prompt_tokens: 200000, input: 6, \
    output: 22.5 }] }";

/// `an` (Anthropic, banded) and `oa` (OpenAI, $4.50 / $20 flat): `an` is the cheaper below the
/// band and the dearer above it.
async fn banded_world(rec: router_usage::Recorder) -> World {
    let an = Upstream::anthropic("an", (3.0, 15.0));
    let oa = Upstream::openai("oa", (4.5, 20.0));
    let servers = vec![MockServer::start().await, MockServer::start().await];
    let bases = [(&an, servers[0].uri()), (&oa, servers[1].uri())];
    let yaml = config(&bases).replacen("price: { input: 3, output: 15 }", BANDED, 1) + SPENDER;
    World::from_yaml_recorded(&yaml, &["an", "oa"], servers, |l| l, Some(rec)).await
}

/// About `tokens` prompt tokens of text.
fn prompt_of(tokens: usize) -> String {
    "word ".repeat(tokens)
}

#[tokio::test]
async fn a_long_prompt_is_ranked_and_charged_at_its_models_upper_band() {
    let dir = tempfile::tempdir().unwrap();
    let rec = recorder(dir.path());
    let w = banded_world(rec.clone()).await;
    let order = |req: &ChatRequest| -> Vec<String> {
        let preview = w.router.preview(req).unwrap();
        preview.candidates.into_iter().map(|(p, _, _)| p).collect()
    };
    assert_eq!(order(&for_acme(prompt_of(1_000))), ["an", "oa"]);
    let long = for_acme(prompt_of(300_000));
    assert_eq!(
        order(&long),
        ["oa", "an"],
        "above the band, `an` is the dearer"
    );
    // Sent to `an` alone: the whole request is billed at the upper band.
    let only_an = ChatRequest {
        providers: vec!["an".into()],
        ..long
    };
    let answer = json!({
        "id": "msg_long", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 300000, "output_tokens": 1000}
    });
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer))
        .mount(&w.servers[0])
        .await;
    let receipt = w.router.chat(only_an).await.unwrap().receipt;
    let micros = 300_000 * 6 + 1_000 * 45 / 2;
    assert_eq!((receipt.cost_usd * 1e6).round() as u64, micros);
    assert_eq!(recorded(&rec).await, micros, "the usage record");
    assert_eq!(spender_spent(&w).await, micros, "the tenant's spend");
}
