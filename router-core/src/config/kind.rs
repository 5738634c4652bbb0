//! What a model is for: answering chats, or embedding text. A request goes only to models of
//! its own kind.

use std::fmt;

/// What a model does, as `kind:` in `providers.yaml` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ModelKind {
    /// A chat model: messages in, an answer out.
    #[default]
    Chat,
    /// An embedding model: texts in, one vector each out, no output tokens.
    Embedding,
}

impl ModelKind {
    /// Both kinds, in the order messages list them.
    pub const ALL: [ModelKind; 2] = [ModelKind::Chat, ModelKind::Embedding];

    /// `chat` or `embedding`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Chat => "chat",
            ModelKind::Embedding => "embedding",
        }
    }

    /// The kind named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
