//! Viber content rules shared by `viber`, `viber+sms` and `rcs+viber+sms`.

use serde_json::Value;

use super::error::OpError;
use super::fields::Fields;

/// Valid `viber_type` values (also accepted as the pipeline's `viber.type`).
pub const VIBER_TYPES: [&str; 5] = ["text", "image", "text+link", "text+image+link", "carousel"];

/// Number of slides a carousel may have (docs/gateway.md#limits).
const SLIDES: std::ops::RangeInclusive<usize> = 2..=5;

/// Validates `viber_type` and the fields it requires; optional Viber fields
/// that are present must still have the right type.
pub fn content(f: &Fields) -> Result<(), OpError> {
    let viber_type = f.req_str("viber_type")?;
    let required: &[&str] = match viber_type {
        "text" => &["viber_message"],
        "image" => &["viber_image"],
        "text+link" => &["viber_message", "viber_link", "viber_button"],
        "text+image+link" => &["viber_message", "viber_image", "viber_link", "viber_button"],
        "carousel" => &["viber_message", "viber_carousel"],
        _ => return Err(OpError::invalid(f.path("viber_type"))),
    };
    for name in required {
        match *name {
            "viber_image" | "viber_link" => {
                f.req_link(name)?;
            }
            "viber_carousel" => {
                if !f.has(name) {
                    return Err(OpError::missing(f.path(name)));
                }
            }
            _ => {
                f.req_str(name)?;
            }
        }
    }
    f.opt_str("viber_message")?;
    f.opt_link("viber_image")?;
    f.opt_link("viber_link")?;
    f.opt_str("viber_button")?;
    carousel(f, viber_type == "carousel")
}

/// `viber_carousel`: an array of slide objects whenever present; the slide
/// count and slide fields matter only for the `carousel` type.
fn carousel(f: &Fields, is_carousel: bool) -> Result<(), OpError> {
    const NAME: &str = "viber_carousel";
    let Some(items) = f.opt_array(NAME)? else {
        return Ok(());
    };
    let mut slides = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        match item {
            Value::Object(obj) => slides.push(f.element(NAME, index, obj)),
            _ => return Err(OpError::invalid(format!("{}[{index}]", f.path(NAME)))),
        }
    }
    if !is_carousel {
        return Ok(());
    }
    if !SLIDES.contains(&slides.len()) {
        return Err(OpError::SlideCount);
    }
    slides.iter().try_for_each(slide)
}

/// One slide: caption, image, url and button; `button2` and `url2` only together.
fn slide(s: &Fields) -> Result<(), OpError> {
    s.req_str("caption")?;
    s.req_link("image")?;
    s.req_link("url")?;
    s.req_str("button")?;
    match (s.opt_str("button2")?, s.opt_link("url2")?) {
        (Some(_), None) => Err(OpError::missing(s.path("url2"))),
        (None, Some(_)) => Err(OpError::missing(s.path("button2"))),
        _ => Ok(()),
    }
}
