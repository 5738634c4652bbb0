//! Entry points that turn text, a file, or a file plus overrides into a [`Registry`].

use std::path::Path;

use super::error::ConfigError;
use super::raw;
use super::registry::Registry;
use super::state::check_redis_url;
use super::validate::validate;

impl Registry {
    /// Parse and validate configuration text. `source` names it in error messages (usually the
    /// file name). Touches neither the filesystem nor the environment.
    pub fn from_yaml_str(text: &str, source: &str) -> Result<Registry, ConfigError> {
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Err(ConfigError::Invalid {
                source_name: source.to_owned(),
                line: None,
                field: "providers".to_owned(),
                message: "the file is empty; add at least one provider under `providers:`"
                    .to_owned(),
            });
        }
        let raw = raw::parse(text).map_err(|e| ConfigError::syntax(source, &e))?;
        validate(&raw, source)
    }

    /// Read and validate a configuration file. Messages name the file as `path` is written.
    pub fn from_path(path: &Path) -> Result<Registry, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|io| ConfigError::Read {
            path: path.to_owned(),
            io,
        })?;
        Registry::from_yaml_str(&text, &path.display().to_string())
    }

    /// [`Registry::from_path`], then the value of `REDIS_URL` (read by the caller and passed in;
    /// `None` or empty when unset) replaces `state`. An invalid value is an error naming
    /// `REDIS_URL`.
    pub fn load(path: &Path, redis_url: Option<&str>) -> Result<Registry, ConfigError> {
        let registry = Registry::from_path(path)?;
        match redis_url.filter(|u| !u.is_empty()) {
            Some(url) => registry.with_state_override(url, "REDIS_URL"),
            None => Ok(registry),
        }
    }

    /// Replace `state` by `url`, checked like `state` in the file. `origin` names where the
    /// value came from (`REDIS_URL`, `--state`) in the error; the error shows the URL redacted.
    pub fn with_state_override(mut self, url: &str, origin: &str) -> Result<Registry, ConfigError> {
        check_redis_url(url).map_err(|why| ConfigError::Override {
            origin: origin.to_owned(),
            message: format!(
                "{why}; fix {origin}, or remove it to use `state` from the configuration file"
            ),
        })?;
        self.state = Some(url.to_owned());
        Ok(self)
    }
}
