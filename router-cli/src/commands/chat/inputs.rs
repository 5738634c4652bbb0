//! The inputs `chat` reads besides the prompt: images and a JSON schema, each with an error
//! that names the file and what to do; and the check of a structured answer.

use std::path::Path;

use anyhow::anyhow;
use base64::Engine as _;
use router_sdk::{ChatResponse, Image, ResponseFormat};

use crate::failure::Failure;

/// The media types a `--image` file may have, by extension.
const IMAGE_TYPES: [(&str, &str); 5] = [
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
];

/// `--image`: an http(s) URL as it is, else a file read and sent inline.
pub(super) fn image(arg: &str) -> Result<Image, Failure> {
    if arg.starts_with("https://") || arg.starts_with("http://") {
        return Ok(Image::Url {
            url: arg.to_owned(),
        });
    }
    let path = Path::new(arg);
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let Some(&(_, media_type)) = IMAGE_TYPES.iter().find(|(ext, _)| *ext == extension) else {
        return Err(Failure::usage(anyhow!(
            "--image {arg}: not a .png, .jpg, .jpeg, .gif or .webp file, nor an http(s) URL; \
             convert the image to one of those"
        )));
    };
    let bytes = std::fs::read(path).map_err(|e| {
        Failure::usage(anyhow!(
            "--image {arg}: cannot read it: {e}; pass an existing image file or a URL"
        ))
    })?;
    Ok(Image::Base64 {
        media_type: media_type.to_owned(),
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
    })
}

/// `--json-schema`: the file's JSON Schema, named after the file.
pub(super) fn json_schema(path: &Path) -> Result<ResponseFormat, Failure> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::usage(if e.kind() == std::io::ErrorKind::InvalidData {
            anyhow!(
                "--json-schema {shown}: not UTF-8 text; pass the JSON Schema as a UTF-8 JSON file"
            )
        } else {
            anyhow!("--json-schema {shown}: cannot read it: {e}; pass a file holding a JSON Schema")
        })
    })?;
    let schema: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure::usage(anyhow!("--json-schema {shown}: not valid JSON ({e})")))?;
    if !schema.is_object() {
        return Err(Failure::usage(anyhow!(
            "--json-schema {shown}: a JSON Schema is a JSON object, e.g. {{\"type\": \"object\"}}"
        )));
    }
    // Providers take 1 to 64 letters, digits, `_` and `-` as the schema's name.
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let name: String = stem
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(64)
        .collect();
    Ok(ResponseFormat::JsonSchema {
        name: if name.is_empty() {
            "answer".into()
        } else {
            name
        },
        schema,
        strict: true,
    })
}

/// A structured answer must be JSON: anything else is the provider's failure (exit 4).
pub(super) fn check_json(answer: &ChatResponse) -> Result<(), Failure> {
    if let Some(refusal) = &answer.receipt.refusal {
        return Err(Failure::provider(anyhow!(
            "{}/{} declined to answer: {:?}",
            answer.receipt.provider,
            answer.receipt.model,
            refusal.chars().take(500).collect::<String>()
        )));
    }
    match serde_json::from_str::<serde_json::Value>(&answer.content) {
        Ok(_) => Ok(()),
        Err(e) => Err(Failure::provider(anyhow!(
            "{}/{} answered with something that is not JSON ({e}), although a JSON schema was \
             asked for; its answer starts: {:?}",
            answer.receipt.provider,
            answer.receipt.model,
            answer.content.chars().take(200).collect::<String>()
        ))),
    }
}
