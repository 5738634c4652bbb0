//! The spill file: records the sink could not take, one JSON object a line, appended under an
//! exclusive lock (so processes sharing the file never interleave) and replayed in order.
//! Blocking: called from `spawn_blocking`.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::record::Record;
use crate::sink::UsageError;

/// The file.
#[derive(Debug, Clone)]
pub(crate) struct Spill {
    path: PathBuf,
}

/// The file, locked, being read for a replay. Dropping it unlocks it as it is; [`Taken::clear`]
/// empties it first.
#[derive(Debug)]
pub(crate) struct Taken {
    file: File,
    reader: BufReader<File>,
    /// Lines that were not records (a line cut short when a process died mid-write).
    pub(crate) skipped: u64,
}

impl Spill {
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, source: io::Error) -> UsageError {
        UsageError::Spill {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn open(&self) -> io::Result<File> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path)
    }

    /// Appends `records` in one write, flushed to the disk.
    pub(crate) fn append(&self, records: &[Record]) -> Result<(), UsageError> {
        let mut text = Vec::with_capacity(records.len() * 512);
        for r in records {
            serde_json::to_writer(&mut text, r).map_err(|e| self.error(e.into()))?;
            text.push(b'\n');
        }
        let write = || -> io::Result<()> {
            let mut file = self.open()?;
            file.lock()?;
            // A line cut short by a process that died mid-write has no newline: end it, so the
            // first record appended now is not glued to it (and skipped with it).
            if file.metadata()?.len() > 0 {
                let mut last = [0u8; 1];
                file.seek(SeekFrom::End(-1))?;
                file.read_exact(&mut last)?;
                if last[0] != b'\n' {
                    file.write_all(b"\n")?;
                }
            }
            file.write_all(&text)?;
            file.sync_data()
        };
        write().map_err(|e| self.error(e))
    }

    /// Whether the file holds anything.
    pub(crate) fn has_records(&self) -> bool {
        std::fs::metadata(&self.path).is_ok_and(|m| m.len() > 0)
    }

    /// Locks the file for a replay; `None` when it is missing or empty.
    pub(crate) fn take(&self) -> Result<Option<Taken>, UsageError> {
        if !self.has_records() {
            return Ok(None);
        }
        let take = || -> io::Result<Option<Taken>> {
            let file = self.open()?;
            file.lock()?;
            if file.metadata()?.len() == 0 {
                return Ok(None);
            }
            let reader = BufReader::new(file.try_clone()?);
            Ok(Some(Taken {
                file,
                reader,
                skipped: 0,
            }))
        };
        take().map_err(|e| self.error(e))
    }
}

impl Taken {
    /// Up to `n` more records, in the order they were written; empty at the end.
    pub(crate) fn next(&mut self, n: usize) -> io::Result<Vec<Record>> {
        let mut out = Vec::with_capacity(n);
        // Bytes, not a `String`: a line cut short inside a multi-byte character is not UTF-8,
        // and must be skipped like any other cut-short line rather than fail the whole replay.
        let mut line = Vec::new();
        while out.len() < n {
            line.clear();
            if self.reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            match serde_json::from_slice::<Record>(&line) {
                Ok(r) => out.push(r),
                Err(_) => self.skipped += 1,
            }
        }
        Ok(out)
    }

    /// Empties the file (everything in it reached the sink), then unlocks it.
    pub(crate) fn clear(self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.sync_data()
    }
}
