//! Where a request body stands in gRPC's message framing: a 5-byte prefix (the
//! compressed flag and the message's big-endian length), then the message. tonic's
//! decoder reserves a message's whole declared length as soon as it has read its
//! prefix, so the port counts that length from then on, not the bytes as they come.

/// The prefix of each gRPC message.
const PREFIX: usize = 5;

/// A body's position in its messages.
#[derive(Debug, Default)]
pub struct Framing {
    /// Prefix bytes of the next message read so far.
    prefix: [u8; PREFIX],
    have: usize,
    /// Bytes of the current message still to come.
    left: usize,
}

/// What one chunk of a body holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Lengths declared by the prefixes the chunk completes.
    pub declared: usize,
    /// Bytes of messages (declared before or in the chunk) the chunk carries.
    pub filled: usize,
}

impl Framing {
    /// Reads the next `chunk` of the body.
    pub fn read(&mut self, mut chunk: &[u8]) -> Step {
        let mut step = Step::default();
        while !chunk.is_empty() {
            if self.left > 0 {
                let n = self.left.min(chunk.len());
                self.left -= n;
                step.filled += n;
                chunk = &chunk[n..];
                continue;
            }
            let n = (PREFIX - self.have).min(chunk.len());
            self.prefix[self.have..self.have + n].copy_from_slice(&chunk[..n]);
            self.have += n;
            chunk = &chunk[n..];
            if self.have == PREFIX {
                let [_, a, b, c, d] = self.prefix;
                let len = u32::from_be_bytes([a, b, c, d]) as usize;
                self.have = 0;
                self.left = len;
                step.declared += len;
            }
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0];
        m.extend(len.to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len as usize));
        m
    }

    #[test]
    fn a_prefix_declares_its_message_and_the_body_fills_it_across_chunks() {
        let mut framing = Framing::default();
        let body = [message(10), message(3)].concat();
        // The first prefix split over two chunks.
        assert_eq!(
            framing.read(&body[..3]),
            Step {
                declared: 0,
                filled: 0
            }
        );
        assert_eq!(
            framing.read(&body[3..9]),
            Step {
                declared: 10,
                filled: 4
            }
        );
        // The rest of the first message and the whole second one.
        assert_eq!(
            framing.read(&body[9..]),
            Step {
                declared: 3,
                filled: 9
            }
        );
        // An empty message declares nothing and fills nothing.
        assert_eq!(framing.read(&message(0)), Step::default());
    }

    #[test]
    fn a_declared_length_counts_in_full_before_its_bytes_come() {
        let mut framing = Framing::default();
        let prefix = &message(1_040_000)[..PREFIX + 100];
        assert_eq!(
            framing.read(prefix),
            Step {
                declared: 1_040_000,
                filled: 100
            }
        );
    }
}
