//! HTTP/2 frames written by hand, as a hostile client writes them: the tests and the
//! hostile-clients benchmark speak to msgw's gRPC port with these, bypassing every
//! client library's manners (flow control, reading what comes back).

#![allow(dead_code)]

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest frame payload every peer accepts.
const MAX_FRAME: usize = 16_384;

/// Frame types.
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

/// One frame.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a frame's payload fits 24 bits");
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// SETTINGS, with `SETTINGS_INITIAL_WINDOW_SIZE` when given.
pub fn settings(initial_window: Option<u32>) -> Vec<u8> {
    let mut payload = Vec::new();
    if let Some(window) = initial_window {
        payload.extend(4u16.to_be_bytes());
        payload.extend(window.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &payload)
}

/// WINDOW_UPDATE of `stream` (0: the connection) by `increment`.
pub fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

/// HPACK integer with an `n`-bit prefix after `first`'s high bits.
fn int(first: u8, n: u32, mut value: usize, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A header block of literals without indexing, as HEADERS and CONTINUATION frames.
pub fn headers(stream: u32, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        block.push(0x00);
        int(0, 7, name.len(), &mut block);
        block.extend(name.as_bytes());
        int(0, 7, value.len(), &mut block);
        block.extend(value.as_bytes());
    }
    let chunks: Vec<&[u8]> = block.chunks(MAX_FRAME).collect();
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let flags = if i + 1 == chunks.len() { 0x4 } else { 0 };
        let kind = if i == 0 { HEADERS } else { CONTINUATION };
        out.extend(frame(kind, flags, stream, chunk));
    }
    out
}

/// A gRPC request on `stream`: its headers (with `metadata`) and one message, the
/// stream ended after it when `end`.
pub fn grpc_request(
    stream: u32,
    path: &str,
    metadata: &[(&str, &str)],
    message: &[u8],
    end: bool,
) -> Vec<u8> {
    let mut all = vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "msgw"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    all.extend_from_slice(metadata);
    let mut out = headers(stream, &all);
    out.extend(frame(DATA, u8::from(end), stream, &grpc_message(message)));
    out
}

/// One more message on an open stream.
pub fn grpc_data(stream: u32, message: &[u8], end: bool) -> Vec<u8> {
    frame(DATA, u8::from(end), stream, &grpc_message(message))
}

/// A gRPC length-prefixed message (uncompressed).
pub fn grpc_message(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend(
        u32::try_from(message.len())
            .expect("a small message")
            .to_be_bytes(),
    );
    out.extend(message);
    out
}

/// `ServerReflectionRequest { list_services: "" }`.
pub const LIST_SERVICES: &[u8] = &[0x3a, 0x00];
/// The reflection path of grpcurl 1.8.
pub const REFLECTION_V1ALPHA: &str =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

/// `ServerReflectionRequest { file_by_filename: name }`.
pub fn file_by_filename(name: &str) -> Vec<u8> {
    let mut out = vec![0x1a];
    int(0, 7, name.len(), &mut out);
    out.extend(name.as_bytes());
    out
}

/// A frame read back: its type, flags, stream and payload.
#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// The next frame from `io`; `None` once it is closed.
pub async fn read_frame<R: tokio::io::AsyncRead + Unpin>(io: &mut R) -> Option<Frame> {
    use tokio::io::AsyncReadExt;
    let mut header = [0u8; 9];
    io.read_exact(&mut header).await.ok()?;
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: header[3],
        flags: header[4],
        stream: u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff,
        payload,
    })
}
