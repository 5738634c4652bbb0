//! Gemini `POST {base_url}/models/{model}:batchEmbedContents`, the key in `x-goog-api-key` as
//! for chat. Gemini reports no usage for it: the estimate is settled.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{EmbedFormat, Embedded};
use crate::embedding::{EmbedInput, EmbedRequest};

/// The Gemini embeddings format.
#[derive(Debug)]
pub(super) struct Gemini;

/// The model as Gemini names it in a path and a body: a configured `models/` prefix is taken.
fn bare(model: &str) -> &str {
    model.strip_prefix("models/").unwrap_or(model)
}

impl EmbedFormat for Gemini {
    fn url(&self, base: &str, model: &str) -> String {
        format!("{base}/models/{}:batchEmbedContents", bare(model))
    }

    fn takes_token_ids(&self) -> bool {
        false
    }

    /// `{requests: [{model: "models/{model}", content: {parts: [{text}]},
    /// outputDimensionality?}]}`, one request per input. `user` has no place in Gemini's API.
    fn body(&self, model: &str, req: &EmbedRequest) -> Value {
        let name = format!("models/{}", bare(model));
        let requests: Vec<Value> = req
            .input
            .iter()
            .map(|input| {
                // Token ids never come here: a request with them goes only to formats that
                // take them (`takes_token_ids`).
                let text = match input {
                    EmbedInput::Text(text) => text.clone(),
                    EmbedInput::Tokens(_) => String::new(),
                };
                let mut one = Map::new();
                one.insert("model".into(), name.as_str().into());
                one.insert("content".into(), json!({ "parts": [{ "text": text }] }));
                if let Some(d) = req.dimensions {
                    one.insert("outputDimensionality".into(), d.into());
                }
                Value::Object(one)
            })
            .collect();
        json!({ "requests": requests })
    }

    fn parse(&self, body: &[u8], _inputs: usize) -> Result<Embedded, String> {
        let answer: Answer = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        Ok(Embedded {
            vectors: answer.embeddings.into_iter().map(|e| e.values).collect(),
            usage: None,
        })
    }
}

#[derive(Deserialize)]
struct Answer {
    embeddings: Vec<One>,
}

#[derive(Deserialize)]
struct One {
    values: Vec<f32>,
}
