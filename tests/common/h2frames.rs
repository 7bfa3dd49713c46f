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
    let mut out = grpc_headers(stream, path, metadata);
    out.extend(frame(DATA, u8::from(end), stream, &grpc_message(message)));
    out
}

/// A gRPC request's headers on `stream` (with `metadata`), its body to follow.
pub fn grpc_headers(stream: u32, path: &str, metadata: &[(&str, &str)]) -> Vec<u8> {
    let mut all = vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "msgw"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    all.extend_from_slice(metadata);
    headers(stream, &all)
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

/// Uploads, on one connection to `addr`, `streams` requests to `path`, each declaring
/// a message of `declared` bytes and sending it as fast as msgw's flow-control
/// windows allow, never ending one, until `until` (or msgw closes the connection).
/// Every byte of DATA sent is added to `sent`.
pub async fn upload_unfinished(
    addr: std::net::SocketAddr,
    path: &str,
    metadata: &[(&str, &str)],
    streams: u32,
    declared: u32,
    until: tokio::time::Instant,
    sent: &std::sync::atomic::AtomicU64,
) {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    struct Windows {
        connection: i64,
        initial: i64,
        streams: HashMap<u32, (i64, u64)>,
        acks: usize,
        closed: bool,
    }
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let (mut rx, mut tx) = tcp.into_split();
    // The message's last byte never comes: msgw holds what it has of it.
    let total = u64::from(declared) + 4;
    let ids: Vec<u32> = (0..streams).map(|i| 1 + 2 * i).collect();
    let windows = Arc::new(Mutex::new(Windows {
        connection: 65_535,
        initial: 65_535,
        streams: ids.iter().map(|&id| (id, (65_535, total))).collect(),
        acks: 0,
        closed: false,
    }));
    let changed = Arc::new(tokio::sync::Notify::new());
    let reader = {
        let (windows, changed) = (windows.clone(), changed.clone());
        tokio::spawn(async move {
            while let Some(f) = read_frame(&mut rx).await {
                let mut w = windows.lock().unwrap();
                match f.kind {
                    SETTINGS if f.flags & 0x1 == 0 => {
                        for setting in f.payload.chunks_exact(6) {
                            if u16::from_be_bytes([setting[0], setting[1]]) == 4 {
                                let new = i64::from(u32::from_be_bytes(
                                    setting[2..6].try_into().unwrap(),
                                ));
                                let delta = new - w.initial;
                                w.initial = new;
                                for (window, _) in w.streams.values_mut() {
                                    *window += delta;
                                }
                            }
                        }
                        w.acks += 1;
                    }
                    WINDOW_UPDATE if f.payload.len() == 4 => {
                        let n = i64::from(
                            u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff,
                        );
                        if f.stream == 0 {
                            w.connection += n;
                        } else if let Some((window, _)) = w.streams.get_mut(&f.stream) {
                            *window += n;
                        }
                    }
                    RST_STREAM => {
                        w.streams.remove(&f.stream);
                    }
                    GOAWAY => w.closed = true,
                    _ => {}
                }
                drop(w);
                changed.notify_one();
            }
            windows.lock().unwrap().closed = true;
            changed.notify_one();
        })
    };
    let mut out = PREFACE.to_vec();
    out.extend(settings(None));
    for &id in &ids {
        out.extend(grpc_headers(id, path, metadata));
    }
    if tx.write_all(&out).await.is_err() {
        reader.abort();
        return;
    }
    let zeros = vec![0u8; MAX_FRAME];
    let mut turn = 0usize;
    loop {
        let next = {
            let mut w = windows.lock().unwrap();
            if w.closed {
                break;
            }
            let mut acks = std::mem::take(&mut w.acks);
            let mut out = Vec::new();
            while acks > 0 {
                out.extend(frame(SETTINGS, 0x1, 0, &[]));
                acks -= 1;
            }
            // Round robin over the streams, so that every message is partly uploaded
            // at once, as an attacker uploads them.
            let connection = w.connection;
            let pick = (0..ids.len())
                .map(|k| ids[(turn + k) % ids.len()])
                .find(|id| {
                    w.streams
                        .get(id)
                        .is_some_and(|(window, left)| *window > 0 && *left > 0 && connection > 0)
                });
            turn += 1;
            if let Some((id, (window, left))) =
                pick.and_then(|id| w.streams.get_mut(&id).map(|entry| (id, entry)))
            {
                let n = (MAX_FRAME as i64)
                    .min(*window)
                    .min(connection)
                    .min(*left as i64) as usize;
                let offset = total - *left;
                let mut payload = zeros[..n].to_vec();
                if offset == 0 && n >= 5 {
                    payload[1..5].copy_from_slice(&declared.to_be_bytes());
                }
                *window -= n as i64;
                *left -= n as u64;
                w.connection -= n as i64;
                out.extend(frame(DATA, 0, id, &payload));
                sent.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            }
            out
        };
        if next.is_empty() {
            if tokio::time::timeout_at(until, changed.notified())
                .await
                .is_err()
            {
                break;
            }
            continue;
        }
        if tokio::time::Instant::now() >= until || tx.write_all(&next).await.is_err() {
            break;
        }
    }
    reader.abort();
}
