//! Appending records to a profile file, resumably.
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{parse_line, Header, Record, SessionRecord};
use crate::ModelError;

/// Appends records to a profile file, one flushed line each, remembering the keys present so a
/// resumed sweep can skip them.
pub struct ProfileWriter {
    path: PathBuf,
    file: File,
    keys: HashSet<String>,
    resumed: usize,
    written: usize,
}

impl ProfileWriter {
    /// Opens `path` for appending. A new (or empty) file gets `header` as its first line. An
    /// existing file must be a profile of the same schema and device (else an error: use
    /// another file); its keys are loaded, and a last line cut short by an interruption is
    /// truncated away.
    pub fn open(path: impl AsRef<Path>, header: &Header) -> Result<ProfileWriter, ModelError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| ModelError::Io {
            path: path.clone(),
            source,
        };
        if path.extension().is_some_and(|e| e == "gz") {
            return Err(ModelError::InvalidParameter(format!(
                "{}: profiles are written uncompressed; compress a finished profile afterwards",
                path.display()
            )));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(io)?;
        let mut keys = HashSet::new();
        let mut good_len = 0usize;
        let mut seen_header = false;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for (i, line) in lines.iter().enumerate() {
            let complete = line.ends_with('\n');
            let body = line.trim_end();
            if body.is_empty() {
                good_len += line.len();
                continue;
            }
            match parse_line(body, &path, i + 1) {
                Ok(rec) => {
                    if let Record::Session(sr) = &rec {
                        if sr.device != header.device.name {
                            return Err(ModelError::WrongDevice {
                                path: path.clone(),
                                file_device: sr.device.clone(),
                                device: header.device.name.clone(),
                            });
                        }
                    }
                    if let Record::Header(h) = &rec {
                        if h.device.name != header.device.name {
                            return Err(ModelError::WrongDevice {
                                path: path.clone(),
                                file_device: h.device.name.clone(),
                                device: header.device.name.clone(),
                            });
                        }
                        seen_header = true;
                    } else if !seen_header {
                        return Err(ModelError::Parse {
                            path: path.clone(),
                            line: i + 1,
                            reason: "a profile must start with a header record".into(),
                        });
                    }
                    if let Some(k) = rec.key() {
                        keys.insert(k);
                    }
                    if complete {
                        good_len += line.len();
                    } else {
                        // A whole record without its newline: keep it, add the newline.
                        good_len += line.len();
                        file.write_all(b"\n").map_err(io)?;
                        good_len += 1;
                    }
                }
                Err(e) if i + 1 == lines.len() && !complete => {
                    // The interrupted last write.
                    let _ = e;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if good_len < text.len() {
            file.set_len(good_len as u64).map_err(io)?;
            file.seek(SeekFrom::End(0)).map_err(io)?;
        }
        let resumed = keys.len();
        let mut w = ProfileWriter {
            path,
            file,
            keys,
            resumed,
            written: 0,
        };
        if !seen_header {
            w.write(&Record::Header(header.clone()))?;
        }
        let started_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        w.write(&Record::Session(SessionRecord {
            device: header.device.name.clone(),
            started_unix_s,
        }))?;
        Ok(w)
    }

    /// True when a record with this key is already in the file.
    pub fn has(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// True when a key in the file satisfies `pred`.
    pub fn has_any(&self, pred: impl Fn(&str) -> bool) -> bool {
        self.keys.iter().any(|k| pred(k))
    }

    /// Measurement records found in the file when it was opened.
    pub fn resumed(&self) -> usize {
        self.resumed
    }

    /// Records written since it was opened.
    pub fn written(&self) -> usize {
        self.written
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as a line and flushes it.
    pub fn write(&mut self, rec: &Record) -> Result<(), ModelError> {
        let mut line = serde_json::to_string(rec).map_err(|e| {
            ModelError::InvalidParameter(format!("record cannot be written as JSON: {e}"))
        })?;
        line.push('\n');
        let path = self.path.clone();
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|source| ModelError::Io { path, source })?;
        if let Some(k) = rec.key() {
            self.keys.insert(k);
        }
        self.written += 1;
        Ok(())
    }
}
