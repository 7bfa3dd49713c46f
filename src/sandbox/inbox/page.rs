//! The inbox page: plain server-rendered HTML, one card per message, with a little
//! script (`inbox.js`) that fetches a card again when the live updates say it
//! changed, and sends the buttons as JSON. No build step, no external asset: it works
//! without a network, and without its script (the buttons are then plain forms).

use std::fmt::Write;

use serde_json::Value;

use super::super::Inner;
use super::super::billing;
use super::super::channel::Channel;
use super::super::state::MessageRecord;
use super::super::status;
use crate::sandbox::message::{Letter, Piece};

const STYLE: &str = include_str!("inbox.css");
const SCRIPT: &str = include_str!("inbox.js");

/// The whole page: the filter `query` and the cards of `shown`.
pub fn page(inner: &Inner, query: &str, shown: &[(u64, MessageRecord)]) -> String {
    let mut html = String::with_capacity(4096 + 2048 * shown.len());
    let _ = write!(
        html,
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>msgw sandbox inbox</title>
<style>{STYLE}</style></head>
<body>
<header class="top">
<h1>Sandbox inbox</h1>
<p>What msgw sent to its built-in sandbox gateway, newest first. Nothing here reached a phone.
<span id="live" class="live">live updates off</span></p>
<form method="get" action="/sandbox/" class="filter">
<label>Phone or id <input name="q" value="{}" inputmode="numeric" autocomplete="off"></label>
<button>Filter</button>{}</form>
</header>
<main id="messages">"#,
        escape(query),
        if query.is_empty() {
            String::new()
        } else {
            r#" <a href="/sandbox/">show all</a>"#.to_owned()
        }
    );
    if shown.is_empty() {
        html.push_str(r#"<p id="empty" class="empty">No message yet. Send one through msgw's gRPC port and it appears here.</p>"#);
    }
    for (id, record) in shown {
        html.push_str(&card(inner, *id, record));
    }
    let _ = write!(html, "</main>\n<script>{SCRIPT}</script>\n</body></html>\n");
    html
}

/// The card of message `id`.
pub fn card(inner: &Inner, id: u64, record: &MessageRecord) -> String {
    let mut html = String::with_capacity(2048);
    let status = record.status;
    let _ = write!(
        html,
        r#"<article class="msg" id="m-{id}" data-id="{id}" data-status="{status}">
<header><span class="status {}">{status}</span> "#,
        status_class(status)
    );
    match &record.letter {
        Some(letter) => {
            let _ = write!(
                html,
                r#"<span class="to">+{}</span> <span class="meta">id <b class="id">{id}</b> · msg_id {} · {} · <time datetime="{}" title="{}">{}</time> · {} {}</span></header>"#,
                letter.phone,
                record.msg_id,
                channels(letter),
                escape(&letter.received),
                escape(&letter.received),
                escape(short_time(&letter.received)),
                billing::amount_json(letter.cost),
                escape(&inner.config.currency),
            );
            for piece in &letter.pieces {
                piece_html(&mut html, piece);
            }
            if let Some(code) = &letter.code {
                let _ = write!(html, r#"<p class="code">Code <b>{}</b></p>"#, escape(code));
            }
        }
        None => {
            let _ = write!(
                html,
                r#"<span class="meta">id <b class="id">{id}</b> · msg_id {} · {} (sent before this msgw kept its inbox)</span></header>"#,
                record.msg_id,
                record.channel.name()
            );
        }
    }
    if let Some(Value::Array(replies)) = &record.replies {
        html.push_str(r#"<ul class="replies">"#);
        for reply in replies {
            let text = reply["message"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| {
                    reply["media"]["filename"]
                        .as_str()
                        .map(|f| format!("📎 {f}"))
                })
                .unwrap_or_default();
            let _ = write!(html, "<li>Reply: {}</li>", escape(&text));
        }
        html.push_str("</ul>");
    }
    html.push_str(r#"<ol class="timeline">"#);
    for moment in &record.timeline {
        let _ = write!(
            html,
            r#"<li><time datetime="{}">{}</time> {} <span class="{}">{}</span></li>"#,
            escape(&moment.time),
            escape(short_time(&moment.time)),
            moment.channel.name(),
            status_class(&moment.status),
            escape(&moment.status),
        );
    }
    html.push_str("</ol>");
    if record.letter.is_some() {
        let _ = write!(
            html,
            r#"<form class="end" method="post" action="/sandbox/messages/{id}/end">
<span>End as</span>
<button name="status" value="DELIVERED">Delivered</button>
<button name="status" value="UNDELIVERABLE">Undeliverable</button>
<button name="status" value="EXPIRED">Expired</button>
<input name="reply" placeholder="reply text" maxlength="1000" aria-label="reply text">
<button name="status" value="REPLIED">Reply</button>
</form>"#
        );
    }
    html.push_str("</article>\n");
    html
}

/// One channel's content as its recipient sees it.
fn piece_html(html: &mut String, piece: &Piece) {
    let _ = write!(
        html,
        r#"<section class="piece"><div class="head">{}"#,
        channel_label(piece.channel)
    );
    if let Some(sender) = &piece.sender {
        let _ = write!(html, " from <b>{}</b>", escape(sender));
    }
    if let (Channel::Sms, Some(text)) = (piece.channel, &piece.text) {
        let (size, encoding) = super::sms_size(text);
        let _ = write!(
            html,
            " · {} part{} · {encoding} · {} chars",
            size.parts,
            if size.parts == 1 { "" } else { "s" },
            size.chars
        );
    }
    html.push_str("</div>");
    if let Some(text) = &piece.text {
        let _ = write!(html, r#"<p class="text">{}</p>"#, escape(text));
    }
    if !piece.extras.is_empty() {
        html.push_str(r#"<dl class="extras">"#);
        for (name, value) in &piece.extras {
            let _ = write!(html, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(value));
        }
        html.push_str("</dl>");
    }
    html.push_str("</section>");
}

/// The channels a message tries, in order (`viber → sms`).
fn channels(letter: &Letter) -> String {
    let names: Vec<&str> = letter.pieces.iter().map(|p| p.channel.name()).collect();
    names.join(" → ")
}

fn channel_label(channel: Channel) -> &'static str {
    match channel {
        Channel::Sms => "SMS",
        Channel::Viber => "Viber",
        Channel::Rcs => "RCS",
        Channel::Telegram => "Telegram code",
        Channel::Voice => "Voice call",
        Channel::Whatsapp => "WhatsApp",
    }
}

/// The CSS class of a status: still moving, ended well, ended badly.
fn status_class(status: &str) -> &'static str {
    if matches!(status, status::ACCEPTED | status::ROUTING) {
        "pending"
    } else if status::is_success(status) {
        "ok"
    } else {
        "failed"
    }
}

/// `HH:MM:SS` of an RFC 3339 time.
fn short_time(time: &str) -> &str {
    time.get(11..19).unwrap_or(time)
}

/// `text` safe inside HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
