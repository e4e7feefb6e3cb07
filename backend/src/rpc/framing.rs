//! Splitting a byte stream into JSON texts: objects or arrays one after
//! another, with or without newlines between them (as SPDK's clients send
//! them), each at most [`MAX_REQUEST`] bytes.

/// Largest request accepted.
pub const MAX_REQUEST: usize = 1 << 20;

/// One unit cut from the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete JSON object or array (not yet parsed).
    Text(Vec<u8>),
    /// Bytes that cannot start a request, up to the end of the line.
    Garbage,
    /// The request under way is larger than [`MAX_REQUEST`].
    TooLarge,
}

/// Incremental scanner: feed bytes, take frames.
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    /// Scan position in `buf` and the state there.
    pos: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Skipping garbage up to the next newline.
    skipping: bool,
}

impl Framer {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet framed.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next frame, if the bytes so far hold one.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            if self.skipping {
                match self.buf.iter().position(|&b| b == b'\n') {
                    Some(nl) => {
                        self.buf.drain(..=nl);
                        self.skipping = false;
                        continue;
                    }
                    None => {
                        self.buf.clear();
                        return None;
                    }
                }
            }
            if self.depth == 0 {
                // Between requests: skip whitespace; a request starts with { or [.
                let start = self.buf.iter().position(|b| !b.is_ascii_whitespace());
                match start {
                    None => {
                        self.buf.clear();
                        return None;
                    }
                    Some(i) => {
                        self.buf.drain(..i);
                        if self.buf[0] != b'{' && self.buf[0] != b'[' {
                            self.skipping = true;
                            return Some(Frame::Garbage);
                        }
                        self.pos = 0;
                    }
                }
            }
            while self.pos < self.buf.len() {
                let b = self.buf[self.pos];
                self.pos += 1;
                if self.in_string {
                    match (self.escaped, b) {
                        (true, _) => self.escaped = false,
                        (false, b'\\') => self.escaped = true,
                        (false, b'"') => self.in_string = false,
                        _ => {}
                    }
                    continue;
                }
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 && self.pos > MAX_REQUEST {
                            return Some(Frame::TooLarge);
                        }
                        if self.depth == 0 {
                            let text: Vec<u8> = self.buf.drain(..self.pos).collect();
                            self.pos = 0;
                            return Some(Frame::Text(text));
                        }
                    }
                    _ => {}
                }
            }
            if self.buf.len() > MAX_REQUEST {
                return Some(Frame::TooLarge);
            }
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[&[u8]]) -> Vec<Frame> {
        let mut f = Framer::default();
        let mut out = Vec::new();
        for chunk in input {
            f.push(chunk);
            while let Some(fr) = f.next_frame() {
                out.push(fr);
            }
        }
        out
    }

    #[test]
    fn back_to_back_and_split_requests() {
        let got = frames(&[b"{\"a\":1}{\"b\":[1,{}]}\n  [", b"{\"c\":\"}{\\\"\"}]"]);
        assert_eq!(
            got,
            vec![
                Frame::Text(b"{\"a\":1}".to_vec()),
                Frame::Text(b"{\"b\":[1,{}]}".to_vec()),
                Frame::Text(b"[{\"c\":\"}{\\\"\"}]".to_vec()),
            ]
        );
    }

    #[test]
    fn garbage_is_skipped_to_the_end_of_the_line() {
        let got = frames(&[b"hello world\n{\"a\":1}"]);
        assert_eq!(
            got,
            vec![Frame::Garbage, Frame::Text(b"{\"a\":1}".to_vec())]
        );
    }

    #[test]
    fn oversized_request_is_refused_even_when_complete() {
        let mut f = Framer::default();
        let mut req = b"{\"x\":\"".to_vec();
        req.extend(std::iter::repeat_n(b'a', MAX_REQUEST));
        req.extend_from_slice(b"\"}");
        f.push(&req);
        assert_eq!(f.next_frame(), Some(Frame::TooLarge));
        let mut f = Framer::default();
        let mut req = b"{\"x\":\"".to_vec();
        req.extend(std::iter::repeat_n(b'a', MAX_REQUEST - 8));
        req.extend_from_slice(b"\"}");
        f.push(&req);
        assert!(matches!(f.next_frame(), Some(Frame::Text(t)) if t.len() == MAX_REQUEST));
    }

    #[test]
    fn oversized_request_is_refused() {
        let mut f = Framer::default();
        f.push(b"{\"x\":\"");
        f.push(&vec![b'a'; MAX_REQUEST + 10]);
        assert_eq!(f.next_frame(), Some(Frame::TooLarge));
    }
}
