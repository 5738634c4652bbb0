//! The model's thinking, carried opaquely between turns.
//!
//! A provider that thinks may sign its thinking (Anthropic's `signature`, or a whole
//! `redacted_thinking` block) and require it back, unchanged, in the next turn of a tool
//! conversation. A [`Thought`] keeps what the provider sent and names the wire format that wrote
//! it: only that format sends it back; any other leaves it out, since no other provider can
//! check another's signature.

use router_core::config::Api;
use serde::{Deserialize, Serialize};

/// One block of the model's thinking, as its provider wrote it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thought {
    /// The wire format that wrote it: the only one it is sent back to.
    #[serde(with = "api_name")]
    pub origin: Api,
    /// The thinking text (empty when the provider keeps it to itself and signs it only).
    #[serde(default)]
    pub text: String,
    /// The provider's signature over the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Thinking the provider encrypted whole (Anthropic's `redacted_thinking` data): no text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
}

impl std::fmt::Debug for Thought {
    /// The origin and sizes: signatures and encrypted data run to kilobytes of base64.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Thought")
            .field("origin", &self.origin.as_str())
            .field("text_len", &self.text.len())
            .field("signature_len", &self.signature.as_ref().map(String::len))
            .field("redacted_len", &self.redacted.as_ref().map(String::len))
            .finish()
    }
}

impl Thought {
    /// Whether `api` may be sent this thought: only its own format, and only when the
    /// provider can check it (signed, or redacted).
    pub fn goes_to(&self, api: Api) -> bool {
        self.origin == api && (self.signature.is_some() || self.redacted.is_some())
    }
}

/// A piece of streamed thinking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThinkingDelta {
    /// More text of the thought in progress (a new one when the last is signed or redacted).
    Text(String),
    /// The signature of the thought in progress: it ends that thought.
    Signature(String),
    /// A whole redacted thought: its encrypted data.
    Redacted(String),
}

/// Assembles streamed thinking into whole thoughts of one wire format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThoughtAssembly {
    origin: Api,
    thoughts: Vec<Thought>,
}

impl ThoughtAssembly {
    /// An empty assembly of thoughts written by `origin`.
    pub fn new(origin: Api) -> Self {
        Self {
            origin,
            thoughts: Vec::new(),
        }
    }

    /// Adds one piece.
    pub fn push(&mut self, delta: &ThinkingDelta) {
        match delta {
            ThinkingDelta::Text(text) => self.open().text.push_str(text),
            ThinkingDelta::Signature(signature) => {
                let open = self.open();
                open.signature.get_or_insert_default().push_str(signature);
            }
            ThinkingDelta::Redacted(data) => {
                let thought = self.empty();
                self.thoughts.push(Thought {
                    redacted: Some(data.clone()),
                    ..thought
                });
            }
        }
    }

    /// The thought in progress: the last one, unless it is signed or redacted.
    fn open(&mut self) -> &mut Thought {
        let closed = self
            .thoughts
            .last()
            .is_none_or(|t| t.signature.is_some() || t.redacted.is_some());
        if closed {
            let thought = self.empty();
            self.thoughts.push(thought);
        }
        let last = self.thoughts.len() - 1;
        &mut self.thoughts[last]
    }

    fn empty(&self) -> Thought {
        Thought {
            origin: self.origin,
            text: String::new(),
            signature: None,
            redacted: None,
        }
    }

    /// Whether no piece arrived.
    pub fn is_empty(&self) -> bool {
        self.thoughts.is_empty()
    }

    /// The thoughts so far, in order, leaving none.
    pub fn take(&mut self) -> Vec<Thought> {
        std::mem::take(&mut self.thoughts)
    }
}

/// An [`Api`] in JSON: its configuration name (`openai`, `anthropic`, `gemini`).
mod api_name {
    use router_core::config::Api;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(api: &Api, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(api.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Api, D::Error> {
        let name = String::deserialize(d)?;
        Api::from_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown origin `{name}`: one of openai, anthropic, gemini"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn pieces_make_signed_and_redacted_thoughts_in_order() {
        let mut assembly = ThoughtAssembly::new(Api::Anthropic);
        for d in [
            ThinkingDelta::Text("Let me ".into()),
            ThinkingDelta::Text("think.".into()),
            ThinkingDelta::Signature("sig-1".into()),
            ThinkingDelta::Redacted("opaque".into()),
            ThinkingDelta::Signature("sig-2".into()),
        ] {
            assembly.push(&d);
        }
        let thoughts = assembly.take();
        assert!(assembly.is_empty());
        assert_eq!(thoughts.len(), 3);
        assert_eq!(thoughts[0].text, "Let me think.");
        assert_eq!(thoughts[0].signature.as_deref(), Some("sig-1"));
        assert_eq!(thoughts[1].redacted.as_deref(), Some("opaque"));
        // A signature with no text before it is a thought of empty text (display omitted).
        assert_eq!(
            (thoughts[2].text.as_str(), thoughts[2].signature.as_deref()),
            ("", Some("sig-2"))
        );
    }

    #[test]
    fn a_thought_goes_back_only_to_its_own_format_and_only_signed() {
        let signed = Thought {
            origin: Api::Anthropic,
            text: "x".into(),
            signature: Some("s".into()),
            redacted: None,
        };
        assert!(signed.goes_to(Api::Anthropic));
        assert!(!signed.goes_to(Api::OpenAi));
        let unsigned = Thought {
            signature: None,
            ..signed.clone()
        };
        assert!(!unsigned.goes_to(Api::Anthropic));
        let json = serde_json::to_string(&signed).unwrap();
        assert!(json.contains(r#""origin":"anthropic""#), "{json}");
        assert_eq!(serde_json::from_str::<Thought>(&json).unwrap(), signed);
        let debug = format!("{signed:?}");
        assert!(!debug.contains("\"s\""), "{debug}");
    }
}
