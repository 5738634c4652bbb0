//! OpenAI's embeddings body in and answer out. `input` is a string, a list of strings, a list of
//! token ids (one input) or a list of lists of token ids; `encoding_format` is `float` (the
//! default) or `base64`, the vectors' little-endian `f32` bytes as OpenAI sends them. A field
//! of the wrong shape, or one OpenAI's API does not have, is an error naming it.

use router_sdk::{EmbedInput, EmbedRequest, EmbedResponse, base64_f32};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How the answer writes each vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// A list of numbers.
    Float,
    /// A base64 string of the `f32`s' little-endian bytes.
    Base64,
}

/// What the gateway reads of an embeddings body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    model: String,
    input: Value,
    #[serde(default)]
    dimensions: Option<u32>,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    user: Option<String>,
}

/// Reads `bytes` as an embeddings body: the router's request and how to write the vectors.
/// `Err` names the field and what is wrong. The body is one JSON value and nothing after it.
pub(crate) fn read(bytes: &[u8]) -> Result<(EmbedRequest, Encoding), String> {
    let body: Body = crate::body::parse(bytes, "an embeddings request")?;
    let encoding = match body.encoding_format.as_deref() {
        None | Some("float") => Encoding::Float,
        Some("base64") => Encoding::Base64,
        Some(other) => {
            return Err(format!(
                "`encoding_format`: `{other}` is not `float` or `base64`"
            ));
        }
    };
    let request = EmbedRequest {
        model: Some(body.model),
        input: inputs(body.input)?,
        dimensions: body.dimensions,
        user: body.user,
        ..EmbedRequest::default()
    };
    Ok((request, encoding))
}

/// `input` in any of its four shapes.
fn inputs(input: Value) -> Result<Vec<EmbedInput>, String> {
    let items = match input {
        Value::String(text) => return Ok(vec![EmbedInput::Text(text)]),
        Value::Array(items) => items,
        _ => {
            return Err(
                "`input`: expected a string, a list of strings, a list of token ids or \
                        a list of lists of token ids"
                    .to_owned(),
            );
        }
    };
    match items.first() {
        None => Err("`input`: the list is empty; give at least one text".to_owned()),
        Some(Value::Number(_)) => Ok(vec![EmbedInput::Tokens(token_ids("input", items)?)]),
        Some(Value::Array(_)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Array(ids) => token_ids(&format!("input[{i}]"), ids).map(EmbedInput::Tokens),
                _ => Err(format!(
                    "`input[{i}]`: expected a list of token ids, as the first input is"
                )),
            })
            .collect(),
        Some(_) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(text) => Ok(EmbedInput::Text(text)),
                _ => Err(format!(
                    "`input[{i}]`: expected a string, as the first input is"
                )),
            })
            .collect(),
    }
}

/// A list of token ids at `path`: whole numbers from 0 to 2^32 - 1.
fn token_ids(path: &str, items: Vec<Value>) -> Result<Vec<u32>, String> {
    items
        .into_iter()
        .enumerate()
        .map(|(j, v)| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    format!("`{path}[{j}]`: `{v}` is not a token id (a whole number from 0 to 4294967295)")
                })
        })
        .collect()
}

/// The answer in OpenAI's shape: `{object: "list", data: [{object: "embedding", index,
/// embedding}], model, usage: {prompt_tokens, total_tokens}}`. Serialized from `f32`s, so each
/// float is written as the shortest decimal that reads back as the same `f32`, as OpenAI
/// writes them.
pub(crate) fn answer(answer: &EmbedResponse, encoding: Encoding) -> Answer<'_> {
    let data = answer
        .embeddings
        .iter()
        .enumerate()
        .map(|(index, vector)| Item {
            object: "embedding",
            index,
            embedding: match encoding {
                Encoding::Float => Vector::Float(vector),
                Encoding::Base64 => Vector::Base64(base64_f32(vector)),
            },
        })
        .collect();
    let prompt = answer.receipt.usage.prompt_tokens;
    Answer {
        object: "list",
        data,
        model: &answer.receipt.model,
        usage: UsageOut {
            prompt_tokens: prompt,
            total_tokens: prompt,
        },
    }
}

/// An embeddings answer as OpenAI writes it.
#[derive(Debug, Serialize)]
pub(crate) struct Answer<'a> {
    object: &'static str,
    data: Vec<Item<'a>>,
    model: &'a str,
    usage: UsageOut,
}

#[derive(Debug, Serialize)]
struct Item<'a> {
    object: &'static str,
    index: usize,
    embedding: Vector<'a>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Vector<'a> {
    Float(&'a [f32]),
    Base64(String),
}

#[derive(Debug, Serialize)]
struct UsageOut {
    prompt_tokens: u64,
    total_tokens: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn inputs_of(body: Value) -> Result<Vec<EmbedInput>, String> {
        read(body.to_string().as_bytes()).map(|(r, _)| r.input)
    }

    #[test]
    fn input_is_read_in_each_of_its_four_shapes() {
        let text = |s: &str| EmbedInput::Text(s.to_owned());
        let cases = [
            (json!("hi"), vec![text("hi")]),
            (json!(["a", "b"]), vec![text("a"), text("b")]),
            (json!([1, 2, 3]), vec![EmbedInput::Tokens(vec![1, 2, 3])]),
            (
                json!([[1], [2, 4294967295u64]]),
                vec![
                    EmbedInput::Tokens(vec![1]),
                    EmbedInput::Tokens(vec![2, u32::MAX]),
                ],
            ),
        ];
        for (input, want) in cases {
            let got = inputs_of(json!({"model": "m", "input": input.clone()})).unwrap();
            assert_eq!(got, want, "{input}");
        }
    }

    #[test]
    fn a_bad_field_is_named() {
        let cases = [
            (
                json!({"model": "m", "input": []}),
                "`input`: the list is empty",
            ),
            (
                json!({"model": "m", "input": 5}),
                "`input`: expected a string",
            ),
            (
                json!({"model": "m", "input": ["a", 1]}),
                "`input[1]`: expected a string",
            ),
            (
                json!({"model": "m", "input": [1, -2]}),
                "`input[1]`: `-2` is not a token id",
            ),
            (
                json!({"model": "m", "input": [[1], [4294967296u64]]}),
                "`input[1][0]`: `4294967296` is not a token id",
            ),
            (
                json!({"model": "m", "input": [[1], "a"]}),
                "`input[1]`: expected a list",
            ),
            (
                json!({"model": "m", "input": "a", "encoding_format": "int8"}),
                "`encoding_format`: `int8` is not `float` or `base64`",
            ),
            (
                json!({"model": "m", "input": "a", "dimensions": -1}),
                "`dimensions`",
            ),
            (
                json!({"model": "m", "input": "a", "stream": true}),
                "unknown field `stream`",
            ),
            (json!({"input": "a"}), "missing field `model`"),
        ];
        for (body, words) in cases {
            let err = read(body.to_string().as_bytes()).unwrap_err();
            assert!(err.contains(words), "{body}: {err}");
        }
    }

    #[test]
    fn the_encoding_is_float_unless_base64_is_asked() {
        let encoding = |body: Value| read(body.to_string().as_bytes()).unwrap().1;
        assert_eq!(
            encoding(json!({"model": "m", "input": "a"})),
            Encoding::Float
        );
        let float = json!({"model": "m", "input": "a", "encoding_format": "float", "user": "u"});
        assert_eq!(encoding(float), Encoding::Float);
        let b64 = json!({"model": "m", "input": "a", "encoding_format": "base64"});
        assert_eq!(encoding(b64), Encoding::Base64);
    }
}
