//! What a request needs of a model beyond text, and what each model can do.
//!
//! A request goes only to models that have every capability its features need; the router
//! checks this before ranking, so a request with tools never reaches a model without them.

use super::values::Api;

/// What a request needs of a model beyond text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// Tool definitions, tool calls or tool results.
    pub tools: bool,
    /// Image parts.
    pub images: bool,
    /// A JSON-schema response format.
    pub json_schema: bool,
    /// Reasoning controls.
    pub reasoning: bool,
}

/// One thing a model can do beyond text, as `capabilities:` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Tool (function) calling.
    Tools,
    /// Images in the prompt.
    Vision,
    /// Answers held to a JSON schema.
    JsonSchema,
    /// Reasoning controls (effort, thinking budget).
    Reasoning,
}

impl Capability {
    /// Every capability, in the order messages list them.
    pub const ALL: [Capability; 4] = [
        Capability::Tools,
        Capability::Vision,
        Capability::JsonSchema,
        Capability::Reasoning,
    ];

    /// The name in `providers.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Tools => "tools",
            Capability::Vision => "vision",
            Capability::JsonSchema => "json_schema",
            Capability::Reasoning => "reasoning",
        }
    }

    /// The capability named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The request feature that needs it, as error messages name it.
    pub fn feature(self) -> &'static str {
        match self {
            Capability::Tools => "tools",
            Capability::Vision => "images",
            Capability::JsonSchema => "a JSON-schema response format",
            Capability::Reasoning => "reasoning controls",
        }
    }
}

/// The set of capabilities of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    tools: bool,
    vision: bool,
    json_schema: bool,
    reasoning: bool,
}

impl Capabilities {
    /// A model of `api` whose entry lists no `capabilities`: tools, vision and JSON schema on
    /// every wire format (each can express them), reasoning nowhere (sending reasoning controls
    /// to a model without them is an error on every provider, so a model must say it has them).
    pub fn default_for(_api: Api) -> Self {
        Self::of(&[
            Capability::Tools,
            Capability::Vision,
            Capability::JsonSchema,
        ])
    }

    /// Exactly `list`.
    pub fn of(list: &[Capability]) -> Self {
        let mut caps = Self::default();
        for &c in list {
            *caps.flag(c) = true;
        }
        caps
    }

    fn flag(&mut self, c: Capability) -> &mut bool {
        match c {
            Capability::Tools => &mut self.tools,
            Capability::Vision => &mut self.vision,
            Capability::JsonSchema => &mut self.json_schema,
            Capability::Reasoning => &mut self.reasoning,
        }
    }

    /// Whether the set holds `c`.
    pub fn has(self, c: Capability) -> bool {
        match c {
            Capability::Tools => self.tools,
            Capability::Vision => self.vision,
            Capability::JsonSchema => self.json_schema,
            Capability::Reasoning => self.reasoning,
        }
    }

    /// The capabilities, in [`Capability::ALL`] order.
    pub fn list(self) -> Vec<Capability> {
        Capability::ALL
            .into_iter()
            .filter(|&c| self.has(c))
            .collect()
    }

    /// What `features` need that this set lacks, in [`Capability::ALL`] order.
    pub fn missing(self, features: Features) -> Vec<Capability> {
        needed(features)
            .into_iter()
            .filter(|&c| !self.has(c))
            .collect()
    }
}

/// The capabilities `features` need.
pub fn needed(features: Features) -> Vec<Capability> {
    let wants = [
        (features.tools, Capability::Tools),
        (features.images, Capability::Vision),
        (features.json_schema, Capability::JsonSchema),
        (features.reasoning, Capability::Reasoning),
    ];
    wants.into_iter().filter(|w| w.0).map(|w| w.1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_needs_what_its_features_use() {
        let features = Features {
            tools: true,
            images: true,
            ..Features::default()
        };
        assert_eq!(needed(features), [Capability::Tools, Capability::Vision]);
        let text_only = Capabilities::of(&[Capability::JsonSchema]);
        assert_eq!(
            text_only.missing(features),
            [Capability::Tools, Capability::Vision]
        );
        assert!(
            Capabilities::default_for(Api::OpenAi)
                .missing(features)
                .is_empty()
        );
    }

    #[test]
    fn reasoning_is_never_assumed() {
        let features = Features {
            reasoning: true,
            ..Features::default()
        };
        for api in Api::ALL {
            assert_eq!(
                Capabilities::default_for(api).missing(features),
                [Capability::Reasoning]
            );
        }
    }

    #[test]
    fn names_round_trip() {
        for c in Capability::ALL {
            assert_eq!(Capability::from_name(c.as_str()), Some(c));
        }
        assert_eq!(Capability::from_name("vison"), None);
    }
}
