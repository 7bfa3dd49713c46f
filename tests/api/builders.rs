//! The requests the tests build, in one place: a plain send looks the same in every
//! test unless the test says otherwise.

use msgw::transport::proto::{SendSmsRequest, SendViberRequest, send_viber_request};

/// An SMS of `id` to the usual number, signed `msgw`.
pub fn sms(id: u64) -> SendSmsRequest {
    SendSmsRequest {
        id,
        phone: "380971234567".into(),
        message: "Your code is 1234".into(),
        signature: "msgw".into(),
        ..Default::default()
    }
}

/// An SMS of `id` to `phone`.
pub fn sms_to(id: u64, phone: &str) -> SendSmsRequest {
    SendSmsRequest {
        phone: phone.into(),
        ..sms(id)
    }
}

/// An SMS of `id` saying `text`, to the number as a caller may write it (with `+`).
pub fn sms_saying(id: u64, text: &str) -> SendSmsRequest {
    SendSmsRequest {
        phone: "+380971234567".into(),
        message: text.into(),
        ..sms(id)
    }
}

/// A Viber message of id 1 with `content`, signed `msgw`.
pub fn viber(content: send_viber_request::Content) -> SendViberRequest {
    SendViberRequest {
        id: 1,
        phone: "380971234567".into(),
        signature: "msgw".into(),
        content: Some(content),
        ..Default::default()
    }
}
