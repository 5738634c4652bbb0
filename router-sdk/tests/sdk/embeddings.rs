//! Embeddings through the router against wiremock upstreams: routed, failed over, limited,
//! budgeted and recorded by the same flow as chats.

use std::time::Duration;

use router_core::config::{UsageSettings, UsageSink};
use router_sdk::{ChatRequest, EmbedInput, EmbedRequest, Error};
use router_state::store::Environment;
use serde_json::json;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

const EMBEDDINGS_PATH: &str = "/v1/embeddings";
const GEMINI_EMBED_PATH: &str = "/v1beta/models/gem-embed:batchEmbedContents";

/// Providers `cheap` and `dear` (OpenAI-compatible, an embedding model `te-cheap` / `te-dear`
/// each, alias `embed`, `cheap_limits` on the cheap one) and `gem` (Gemini, `gem-embed`, alias
/// `gembed`), and a chat model `talk` at `dear`; each at its server of `servers`.
fn yaml(servers: &[MockServer], cheap_limits: &str, extra: &str) -> String {
    format!(
        "defaults: {{ model: embed }}
providers:
  - name: cheap
    api: openai
    base_url: {}/v1
    api_key_env: CHEAP_API_KEY
    models:
      - {{ name: te-cheap, kind: embedding, aliases: [embed], price: {{ input: 0.02 }}, limits: {{ {cheap_limits} }} }}
  - name: dear
    api: openai
    base_url: {}/v1
    api_key_env: DEAR_API_KEY
    models:
      - {{ name: te-dear, capabilities: [embedding], aliases: [embed], price: {{ input: 0.13, output: 0 }}, dimensions: 3072 }}
      - {{ name: talk, price: {{ input: 1, output: 2 }} }}
  - name: gem
    api: gemini
    base_url: {}/v1beta
    api_key_env: GEM_API_KEY
    models:
      - {{ name: gem-embed, kind: embedding, aliases: [gembed, both], price: {{ input: 0.01 }}, dimensions: 768, limits: {{ tpm: 1000000 }} }}
{extra}",
        servers[0].uri(),
        servers[1].uri(),
        servers[2].uri()
    )
}

async fn world(cheap_limits: &str, extra: &str) -> World {
    world_recorded(cheap_limits, extra, None).await
}

async fn world_recorded(
    cheap_limits: &str,
    extra: &str,
    recorder: Option<router_usage::Recorder>,
) -> World {
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(MockServer::start().await);
    }
    let yaml = yaml(&servers, cheap_limits, extra);
    let names = ["cheap", "dear", "gem"];
    World::from_yaml_recorded(&yaml, &names, servers, |l| l, recorder).await
}

/// An OpenAI embeddings answer: one vector `[i, 0.5]` per input, `prompt` tokens used.
fn openai_answer(inputs: usize, prompt: u64) -> ResponseTemplate {
    let data: Vec<_> = (0..inputs)
        .rev()
        .map(|i| json!({"object": "embedding", "index": i, "embedding": [i as f32, 0.5]}))
        .collect();
    ResponseTemplate::new(200).set_body_json(json!({
        "object": "list", "data": data, "model": "te",
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
    }))
}

/// A text of `tokens` tokens by the router's estimate (four characters each).
fn text_of(tokens: usize) -> String {
    "abcd".repeat(tokens)
}

#[tokio::test]
async fn embeddings_go_to_the_cheapest_embedding_model_in_input_order() {
    let w = world("rpm: 100", "").await;
    Mock::given(method("POST"))
        .and(path(EMBEDDINGS_PATH))
        .and(header(
            "authorization",
            format!("Bearer {}", planted_key("cheap")).as_str(),
        ))
        .and(body_partial_json(json!({
            "model": "te-cheap", "input": ["one", "two"], "encoding_format": "float",
        })))
        .respond_with(openai_answer(2, 3))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let answer = w
        .router
        .embed(EmbedRequest::new(["one", "two"]))
        .await
        .unwrap();
    assert_eq!(answer.embeddings, [vec![0.0, 0.5], vec![1.0, 0.5]]);
    let r = &answer.receipt;
    assert_eq!(
        (r.provider.as_str(), r.model.as_str()),
        ("cheap", "te-cheap")
    );
    assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (3, 0));
    assert!(
        (r.cost_usd - 3.0 * 0.02 / 1e6).abs() < 1e-15,
        "{}",
        r.cost_usd
    );
    assert_eq!(r.finish_reason, None);
    // Settled: nothing in flight, the window holds what the provider counted.
    assert_eq!(w.in_flight().await, 0);
    assert_eq!(w.snapshot("te-cheap").await.usage.requests, 1);
}

#[tokio::test]
async fn a_429_fails_over_to_the_next_cheapest_embedding_model() {
    let w = world("rpm: 100", "").await;
    Mock::given(method("POST"))
        .and(path(EMBEDDINGS_PATH))
        .respond_with(
            error_json(429, "openai/rate_limit_429.json").insert_header("retry-after", "7"),
        )
        .expect(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(EMBEDDINGS_PATH))
        .and(body_partial_json(json!({"model": "te-dear"})))
        .respond_with(openai_answer(1, 2))
        .expect(1)
        .mount(&w.servers[1])
        .await;
    let answer = w.router.embed(EmbedRequest::new(["hello"])).await.unwrap();
    let r = &answer.receipt;
    assert_eq!(r.provider, "dear");
    assert_eq!(r.attempts.len(), 2);
    assert_eq!(r.attempts[0].provider, "cheap");
    assert!(w.sleeper.slept().is_empty(), "failed over without waiting");
    let cooldown = w.snapshot("te-cheap").await.cooldown.unwrap();
    assert!(cooldown <= Duration::from_secs(7) && cooldown > Duration::from_secs(6));
}

#[tokio::test]
async fn a_tpm_limited_embedding_deployment_is_never_exceeded() {
    // 40 tokens a request (160 characters) against tpm 100: two fit the minute, the third goes
    // to the dearer model.
    let w = world("tpm: 100", "").await;
    Mock::given(method("POST"))
        .and(path(EMBEDDINGS_PATH))
        .respond_with(openai_answer(1, 40))
        .expect(2)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(EMBEDDINGS_PATH))
        .respond_with(openai_answer(1, 40))
        .expect(1)
        .mount(&w.servers[1])
        .await;
    let mut served = Vec::new();
    for _ in 0..3 {
        let req = EmbedRequest::new([text_of(40)]);
        served.push(w.router.embed(req).await.unwrap().receipt.provider);
        let tokens = w.snapshot("te-cheap").await.usage.tokens;
        assert!(tokens <= 100, "te-cheap's window holds {tokens} tokens");
    }
    assert_eq!(served, ["cheap", "cheap", "dear"]);
    // Input alone is reserved and kept: 2 x 40, no output.
    assert_eq!(w.snapshot("te-cheap").await.usage.tokens, 80);
    // Alone, the cheap model makes the third wait past a short deadline.
    let req = EmbedRequest {
        providers: vec!["cheap".into()],
        deadline: Some(Duration::from_secs(5)),
        ..EmbedRequest::new([text_of(40)])
    };
    let err = w.router.embed(req).await.unwrap_err();
    assert!(matches!(err, Error::NoCapacity { .. }), "{err}");
}

#[tokio::test]
async fn a_tenant_whose_budget_is_spent_is_refused_before_any_call() {
    let tenants = "tenants:
  tiers:
    thin: { budget: { daily_usd: 0.000002 } }
  members:
    acme: thin
";
    let w = world("rpm: 100", tenants).await;
    // 50 tokens estimated at $0.02 per million: 1 micro-dollar; the provider reports 100, which
    // spends the day's 2.
    Mock::given(method("POST"))
        .respond_with(openai_answer(1, 100))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let req = || EmbedRequest {
        tenant: Some("acme".into()),
        ..EmbedRequest::new([text_of(50)])
    };
    w.router.embed(req()).await.unwrap();
    let err = w.router.embed(req()).await.unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted { tenant, .. } if tenant == "acme"),
        "{err}"
    );
    assert!(
        w.sleeper.slept().is_empty(),
        "a spent budget is not waited for"
    );
}

#[tokio::test]
async fn gemini_embeddings_settle_the_estimate() {
    let w = world("rpm: 100", "").await;
    Mock::given(method("POST"))
        .and(path(GEMINI_EMBED_PATH))
        .and(header("x-goog-api-key", planted_key("gem").as_str()))
        .and(body_partial_json(json!({"requests": [
            {"model": "models/gem-embed", "content": {"parts": [{"text": text_of(10)}]},
             "outputDimensionality": 8},
        ]})))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"embeddings": [{"values": [0.25, -1.0]}]})),
        )
        .expect(1)
        .mount(&w.servers[2])
        .await;
    let req = EmbedRequest {
        model: Some("gembed".into()),
        dimensions: Some(8),
        ..EmbedRequest::new([text_of(10)])
    };
    let answer = w.router.embed(req).await.unwrap();
    assert_eq!(answer.embeddings, [vec![0.25, -1.0]]);
    // Gemini reports no usage: the estimate, 10 tokens, is what stands.
    assert_eq!(answer.receipt.usage.prompt_tokens, 10);
    assert_eq!(w.snapshot("gem-embed").await.usage.tokens, 10);
}

#[tokio::test]
async fn a_request_to_a_model_of_the_other_kind_is_refused_naming_it_and_its_kind() {
    let w = world("rpm: 100", "").await;
    let err = w
        .router
        .embed(EmbedRequest {
            model: Some("talk".into()),
            ..EmbedRequest::new(["hi"])
        })
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidRequest(_)), "{text}");
    assert!(
        text.contains("model `talk` is a chat model")
            && text.contains("embedding models: te-cheap, te-dear, gem-embed"),
        "{text}"
    );
    // A chat to the default (embedding) alias is refused the other way round.
    let err = w.router.chat(ChatRequest::new("hi")).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("model `embed` is an embedding model") && text.contains("chat models: talk"),
        "{text}"
    );
}

#[tokio::test]
async fn token_ids_and_large_dimensions_go_only_where_they_can() {
    let w = world("rpm: 100", "").await;
    Mock::given(method("POST"))
        .and(path(EMBEDDINGS_PATH))
        .and(body_partial_json(
            json!({"input": [[9906, 1917]], "dimensions": 3000}),
        ))
        .respond_with(openai_answer(1, 2))
        .expect(1)
        .mount(&w.servers[1])
        .await;
    // te-cheap says nothing of its size; te-dear makes 3072: both may be asked for 3000, and
    // the cheap one is refused here only by the providers restriction.
    let req = EmbedRequest {
        dimensions: Some(3000),
        providers: vec!["dear".into(), "gem".into()],
        ..EmbedRequest::new([vec![9906u32, 1917]])
    };
    let answer = w.router.embed(req).await.unwrap();
    assert_eq!(answer.receipt.provider, "dear");
    // Gemini takes no token ids, nor more than its 768 dimensions.
    let ids = EmbedRequest {
        model: Some("gembed".into()),
        ..EmbedRequest::new([EmbedInput::Tokens(vec![1, 2])])
    };
    let err = w.router.embed(ids).await.unwrap_err().to_string();
    assert!(
        err.contains("token ids go only to OpenAI-compatible"),
        "{err}"
    );
    let wide = EmbedRequest {
        model: Some("gembed".into()),
        dimensions: Some(1024),
        ..EmbedRequest::new(["hi"])
    };
    let err = w.router.embed(wide).await.unwrap_err().to_string();
    assert!(
        err.contains("dimensions: 1024 is more than gem/gem-embed makes"),
        "{err}"
    );
}

#[tokio::test]
async fn a_bad_request_is_refused_before_admission() {
    let w = world("rpm: 100", "").await;
    let cases = [
        (EmbedRequest::new(Vec::<String>::new()), "nothing to embed"),
        (EmbedRequest::new(["a", ""]), "input[1] is empty"),
        (
            EmbedRequest::new([EmbedInput::from("a"), EmbedInput::Tokens(vec![1])]),
            "mixes texts and token ids",
        ),
    ];
    for (req, words) in cases {
        let err = w.router.embed(req).await.unwrap_err().to_string();
        assert!(err.contains(words), "{err}");
    }
    assert_eq!(w.snapshot("te-cheap").await.usage.requests, 0);
}

#[tokio::test]
async fn an_embedding_request_leaves_a_usage_record_with_no_completion() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = UsageSettings::with_sink(UsageSink::Sqlite(Some(dir.path().join("u.db"))));
    settings.spill = Some(dir.path().join("u.spill"));
    settings.flush = Duration::from_millis(1);
    let env = Environment::fixed::<&str>(&[], None);
    let rec = router_state::usage::open(&settings, &env).unwrap().unwrap();
    let w = world_recorded("rpm: 100", SPENDER, Some(rec.clone())).await;
    Mock::given(method("POST"))
        .and(path(EMBEDDINGS_PATH))
        .respond_with(openai_answer(2, 50))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let req = EmbedRequest {
        tenant: Some("acme".into()),
        request_id: Some("emb-1".into()),
        ..EmbedRequest::new(["one", "two"])
    };
    w.router.embed(req).await.unwrap();
    rec.flush().await;
    let conn = rusqlite::Connection::open(dir.path().join("u.db")).unwrap();
    let row: (String, String, String, i64, i64, i64, String, bool) = conn
        .query_row(
            "SELECT request_id, tenant, model, prompt_tokens, completion_tokens, cost_micros, \
             outcome, stream FROM usage_records",
            [],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "emb-1".into(),
            "acme".into(),
            "te-cheap".into(),
            50,
            0,
            1,
            "ok".into(),
            false
        )
    );
}
