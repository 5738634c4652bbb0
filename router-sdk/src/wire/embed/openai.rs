//! OpenAI-compatible `POST {base_url}/embeddings`.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{EmbedFormat, Embedded};
use crate::embedding::{EmbedInput, EmbedRequest, f32s_of_base64};
use crate::types::Usage;
use crate::wire::nullable;

/// The OpenAI-compatible embeddings format.
#[derive(Debug)]
pub(super) struct OpenAi;

impl EmbedFormat for OpenAi {
    fn url(&self, base: &str, _model: &str) -> String {
        format!("{base}/embeddings")
    }

    fn takes_token_ids(&self) -> bool {
        true
    }

    /// `{model, input, encoding_format: "float", dimensions?, user?}`: the inputs always as a
    /// list (of strings, or of token-id lists), and always asked for as floats.
    fn body(&self, model: &str, req: &EmbedRequest) -> Value {
        let input: Vec<Value> = req
            .input
            .iter()
            .map(|i| match i {
                EmbedInput::Text(text) => json!(text),
                EmbedInput::Tokens(ids) => json!(ids),
            })
            .collect();
        let mut body = Map::new();
        body.insert("model".into(), model.into());
        body.insert("input".into(), input.into());
        body.insert("encoding_format".into(), "float".into());
        if let Some(d) = req.dimensions {
            body.insert("dimensions".into(), d.into());
        }
        if let Some(user) = &req.user {
            body.insert("user".into(), user.as_str().into());
        }
        Value::Object(body)
    }

    fn parse(&self, body: &[u8], inputs: usize) -> Result<Embedded, String> {
        let answer: Answer = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; inputs];
        for item in answer.data {
            let slot = vectors
                .get_mut(item.index)
                .ok_or_else(|| format!("embedding index {} of {inputs} inputs", item.index))?;
            if slot.is_some() {
                return Err(format!("embedding index {} twice", item.index));
            }
            *slot = Some(match item.embedding {
                Vector::Floats(v) => v,
                // Asked for floats; a server that sends base64 anyway is read all the same.
                Vector::Base64(text) => f32s_of_base64(&text)
                    .ok_or_else(|| format!("embedding {} is not base64 of f32s", item.index))?,
            });
        }
        let vectors = vectors
            .into_iter()
            .enumerate()
            .map(|(i, v)| v.ok_or_else(|| format!("no embedding of input {i}")))
            .collect::<Result<_, _>>()?;
        Ok(Embedded {
            vectors,
            usage: answer.usage.map(|u| Usage::new(u.prompt_tokens, 0)),
        })
    }
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vector,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Vector {
    Floats(Vec<f32>),
    Base64(String),
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default, deserialize_with = "nullable")]
    prompt_tokens: u64,
}
