//! [`ConfigError`]: everything that can be wrong with a configuration, said in one line.

use std::fmt;
use std::path::PathBuf;

/// Why a configuration could not become a [`Registry`](super::Registry).
///
/// Every message names where the problem is (file and line, or the environment variable or
/// option), the field, the bad value where showing it is safe, and what to do. Messages never
/// contain an API key or a password from a URL.
///
/// `Display` is one line. The underlying I/O or YAML error is part of that line, so
/// [`std::error::Error::source`] is `None`: print the error itself, not its chain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read config file {}: {io}", path.display())]
    #[non_exhaustive]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// What the operating system said.
        io: std::io::Error,
    },

    /// The file is not YAML of the expected shape: bad syntax, an unknown or missing field, a
    /// value of the wrong type. The message is serde-saphyr's, without the source snippet (a
    /// snippet could echo a secret written into the file by mistake).
    #[error("{}: {message}", At(source_name, *line, *column))]
    #[non_exhaustive]
    Syntax {
        /// File name (or other label) of the configuration text.
        source_name: String,
        /// 1-based line, when known.
        line: Option<u64>,
        /// 1-based column, when known.
        column: Option<u64>,
        /// What is wrong.
        message: String,
    },

    /// The YAML has the expected shape but a value is not acceptable.
    #[error("{}: {field}: {message}", At(source_name, *line, None))]
    #[non_exhaustive]
    Invalid {
        /// File name (or other label) of the configuration text.
        source_name: String,
        /// 1-based line of the offending value, when known.
        line: Option<u64>,
        /// Path of the field, e.g. `providers[deepseek].models[deepseek-chat].limits.rpm`.
        field: String,
        /// What is wrong, the bad value, and what to do.
        message: String,
    },

    /// A value given outside the file (e.g. `REDIS_URL`, `--state`) is not acceptable.
    #[error("{origin}: {message}")]
    #[non_exhaustive]
    Override {
        /// Where the value came from: an environment variable or a command-line option.
        origin: String,
        /// What is wrong and what to do.
        message: String,
    },
}

impl ConfigError {
    /// The file name (or other label) the error is about; for [`ConfigError::Override`], the
    /// environment variable or option.
    pub fn source_name(&self) -> String {
        match self {
            ConfigError::Read { path, .. } => path.display().to_string(),
            ConfigError::Syntax { source_name, .. } | ConfigError::Invalid { source_name, .. } => {
                source_name.clone()
            }
            ConfigError::Override { origin, .. } => origin.clone(),
        }
    }

    /// The 1-based line of the problem, when known.
    pub fn line(&self) -> Option<u64> {
        match self {
            ConfigError::Syntax { line, .. } | ConfigError::Invalid { line, .. } => *line,
            ConfigError::Read { .. } | ConfigError::Override { .. } => None,
        }
    }

    /// The path of the offending field, for validation errors.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }

    pub(crate) fn syntax(source_name: &str, err: &serde_saphyr::Error) -> ConfigError {
        let location = err.location().filter(|l| l.line() > 0);
        let mut message = plain_message(err);
        if message.contains("unknown field `api_key`") {
            message.push_str(
                "; do not put a key in this file: set `api_key_env` to the name of the \
                 environment variable that holds it",
            );
        }
        ConfigError::Syntax {
            source_name: source_name.to_owned(),
            line: location.map(|l| l.line()),
            column: location.map(|l| l.column()),
            message,
        }
    }
}

/// serde-saphyr's message alone: without snippet, and without its own " at line L, column C"
/// suffix (our prefix already says where).
fn plain_message(err: &serde_saphyr::Error) -> String {
    let text = err.without_snippet().to_string();
    let first = text.lines().next().unwrap_or_default();
    let message = match first.rfind(" at line ") {
        Some(i) if first[i..].contains(", column ") => &first[..i],
        _ => first,
    };
    // Advice meant for programs using serde-saphyr, not for people editing the file.
    match message.strip_suffix(", set DuplicateKeyPolicy in Options if acceptable") {
        Some(duplicate) => format!("{duplicate}; remove one of them"),
        None => message.to_owned(),
    }
}

/// `file:line:column`, `file:line` or `file`.
struct At<'a>(&'a str, Option<u64>, Option<u64>);

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.1, self.2) {
            (Some(line), Some(column)) => write!(f, "{}:{line}:{column}", self.0),
            (Some(line), None) => write!(f, "{}:{line}", self.0),
            (None, _) => f.write_str(self.0),
        }
    }
}
