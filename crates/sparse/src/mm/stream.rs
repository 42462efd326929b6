//! Bounded-memory reading of a text stream (a `.gz` file as it is decompressed, or any reader):
//! single lines for the banner and size line and for the re-scans of the error path, and the
//! data section in blocks that end at line boundaries.
//!
//! The buffer never grows: a block holds at most [`BLOCK`] bytes. What a line longer than that
//! may be is bounded too: blank space at the start of a line is dropped as it is read, and a
//! comment line is skipped through to its newline however long it is, so a stream of gigabytes
//! of blank lines or comments is read in constant memory. A data line longer than a block
//! cannot be a Matrix Market entry and is refused ([`BlockError::LongLine`]).
use std::io::{self, Read};

/// Bytes of a data section handed to the parser at a time (and the longest data line read).
pub(super) const BLOCK: usize = 8 << 20;

/// Bytes of a line kept by [`Stream::next_line`] for the banner and size line: far more than
/// either needs, so that a line is only ever cut when it is nonsense anyway.
pub(super) const KEEP: usize = 1 << 16;

/// A reader of decompressed text with a fixed-size buffer.
pub(super) struct Stream<R> {
    src: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// 1-based number of the line that starts at `buf[start]`.
    line: usize,
}

/// A line: its 1-based number, its first bytes (newline excluded), and what the rest held.
pub(super) struct Line {
    /// 1-based line number.
    pub number: usize,
    /// The first bytes of the line, at most the `keep` asked for.
    pub text: Vec<u8>,
    /// The line was longer than `text`.
    pub cut: bool,
    /// Every byte of the whole line is ASCII white space.
    pub blank: bool,
}

/// A block of the data section: whole lines (the last one may lack its newline at the end of
/// the input).
pub(super) struct Block<'a> {
    /// The text.
    pub text: &'a [u8],
    /// 1-based number of its first line.
    pub first_line: usize,
}

/// Why no block came.
#[derive(Debug)]
pub(super) enum BlockError {
    /// The reader failed (for a `.gz` file, also a corrupt stream).
    Io(io::Error),
    /// A line with data that does not end within [`BLOCK`] bytes.
    LongLine {
        /// 1-based line number.
        line: usize,
        /// Its first bytes, for quoting.
        start: Vec<u8>,
    },
}

impl From<io::Error> for BlockError {
    fn from(e: io::Error) -> Self {
        BlockError::Io(e)
    }
}

#[inline]
fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t' || c == b'\r'
}

impl<R: Read> Stream<R> {
    /// A stream over `src` whose blocks hold at most `capacity` bytes.
    pub fn new(src: R, capacity: usize) -> Self {
        Stream {
            src,
            // Zeroed by the system on first touch: a small input touches little of it.
            buf: vec![0; capacity.max(64)],
            start: 0,
            end: 0,
            eof: false,
            line: 1,
        }
    }

    /// Reads until at least `want` bytes are buffered, the buffer is full or the input ends.
    fn fill(&mut self, want: usize) -> io::Result<()> {
        if self.end - self.start >= want || self.eof {
            return Ok(());
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end < want.min(self.buf.len()) {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next line, keeping its first `keep` bytes; `None` at the end of the input.
    pub fn next_line(&mut self, keep: usize) -> io::Result<Option<Line>> {
        let mut out = Line {
            number: self.line,
            text: Vec::new(),
            cut: false,
            blank: true,
        };
        let mut any = false;
        loop {
            self.fill(1)?;
            if self.start == self.end {
                if any {
                    self.line += 1;
                    return Ok(Some(out));
                }
                return Ok(None);
            }
            any = true;
            let avail = &self.buf[self.start..self.end];
            let (piece, done) = match memchr::memchr(b'\n', avail) {
                Some(q) => (&avail[..q], q + 1),
                None => (avail, avail.len()),
            };
            let room = keep.saturating_sub(out.text.len());
            out.text.extend_from_slice(&piece[..piece.len().min(room)]);
            out.cut |= piece.len() > room;
            out.blank &= piece.iter().all(u8::is_ascii_whitespace);
            let ended = done > piece.len();
            self.start += done;
            if ended {
                self.line += 1;
                return Ok(Some(out));
            }
        }
    }

    /// Skips the rest of the current line, through its newline.
    fn skip_line(&mut self) -> io::Result<()> {
        loop {
            self.fill(1)?;
            if self.start == self.end {
                return Ok(());
            }
            let avail = &self.buf[self.start..self.end];
            match memchr::memchr(b'\n', avail) {
                Some(q) => {
                    self.start += q + 1;
                    self.line += 1;
                    return Ok(());
                }
                None => self.start = self.end,
            }
        }
    }

    /// The next block of whole lines, `None` at the end of the input.
    pub fn next_block(&mut self) -> Result<Option<Block<'_>>, BlockError> {
        let cap = self.buf.len();
        loop {
            self.fill(cap)?;
            if self.start == self.end {
                return Ok(None);
            }
            let avail = &self.buf[self.start..self.end];
            let len = if self.eof {
                avail.len()
            } else if let Some(q) = memchr::memrchr(b'\n', avail) {
                q + 1
            } else {
                // One line fills the whole buffer. Blank space at its start is dropped (it
                // changes nothing), a comment is skipped; anything else is no entry.
                let t = avail.iter().take_while(|&&c| is_blank(c)).count();
                if t == avail.len() {
                    self.start = self.end;
                } else if avail[t] == b'%' {
                    self.skip_line()?;
                } else if t > 0 {
                    self.start += t;
                } else {
                    return Err(BlockError::LongLine {
                        line: self.line,
                        start: avail[..avail.len().min(100)].to_vec(),
                    });
                }
                continue;
            };
            let first_line = self.line;
            let text = &self.buf[self.start..self.start + len];
            self.line += memchr::memchr_iter(b'\n', text).count();
            self.start += len;
            return Ok(Some(Block { text, first_line }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(text: &[u8], cap: usize) -> Result<Vec<(usize, Vec<u8>)>, BlockError> {
        let mut s = Stream::new(text, cap);
        let mut out = Vec::new();
        while let Some(b) = s.next_block()? {
            out.push((b.first_line, b.text.to_vec()));
        }
        Ok(out)
    }

    #[test]
    fn blocks_end_at_line_boundaries_and_count_lines() {
        let text = b"1 1 1\n2 2 2\n3 3 3\n4 4 4";
        let b = blocks(text, 13).unwrap_or_default();
        let joined: Vec<u8> = b.iter().flat_map(|(_, t)| t.clone()).collect();
        assert_eq!(joined, text.to_vec());
        for (first, t) in &b {
            assert!(t.ends_with(b"\n") || t.ends_with(b"4"));
            let at = text.windows(t.len()).position(|w| w == t.as_slice());
            let line = 1 + at.map_or(0, |p| text[..p].iter().filter(|&&c| c == b'\n').count());
            assert_eq!(*first, line);
        }
    }

    #[test]
    fn long_blank_and_comment_lines_are_dropped() {
        let mut text = vec![b' '; 300];
        text.extend_from_slice(b"1 1 1\n%");
        text.extend_from_slice(&[b'x'; 300]);
        text.extend_from_slice(b"\n\n2 2 2\n");
        let b = blocks(&text, 64).unwrap_or_default();
        assert!(b.iter().all(|(_, t)| t.len() <= 64));
        let joined: Vec<u8> = b.iter().flat_map(|(_, t)| t.clone()).collect();
        // What is left of the blank space and the comment fits a block.
        let kept: Vec<u8> = joined.iter().copied().filter(|&c| c != b' ').collect();
        assert_eq!(kept, b"111\n\n222\n".to_vec());
        assert!(joined.len() < 80);
        // "2 2 2" is on line 4 of the input.
        let last = b.iter().find(|(_, t)| t.ends_with(b"2 2 2\n"));
        let (first, t) = last.cloned().unwrap_or_default();
        let before = t.iter().filter(|&&c| c == b'\n').count() - 1;
        assert_eq!(first + before, 4);
    }

    #[test]
    fn a_long_data_line_is_refused_with_its_number() {
        let mut text = b"1 1 1\n".to_vec();
        text.extend_from_slice(&[b'7'; 200]);
        match blocks(&text, 64) {
            Err(BlockError::LongLine { line, .. }) => assert_eq!(line, 2),
            other => panic!("expected a long line, got {:?}", other.map(|b| b.len())),
        }
    }

    #[test]
    fn lines_are_kept_up_to_the_limit() {
        let mut s = Stream::new(&b"abcdef\n  \nxy"[..], 64);
        let l = s
            .next_line(3)
            .ok()
            .flatten()
            .map(|l| (l.number, l.text, l.cut, l.blank));
        assert_eq!(l, Some((1, b"abc".to_vec(), true, false)));
        let l = s.next_line(3).ok().flatten().map(|l| (l.number, l.blank));
        assert_eq!(l, Some((2, true)));
        let l = s
            .next_line(3)
            .ok()
            .flatten()
            .map(|l| (l.number, l.text, l.cut));
        assert_eq!(l, Some((3, b"xy".to_vec(), false)));
        assert!(s.next_line(3).ok().flatten().is_none());
    }
}
