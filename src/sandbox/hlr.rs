//! Deterministic HLR lookups.

use serde_json::{Value, json};

use super::magic::Magic;
use super::status;

/// A mobile network as the HLR result shows it.
#[derive(Debug, Clone, Copy)]
struct Network {
    name: &'static str,
    /// Operator code dialled after the country code.
    prefix: u64,
    mnc: u64,
}

/// A country the sandbox knows.
#[derive(Debug, Clone, Copy)]
struct Country {
    name: &'static str,
    prefix: u64,
    mcc: u64,
}

const COUNTRIES: [Country; 5] = [
    Country {
        name: "Ukraine",
        prefix: 380,
        mcc: 255,
    },
    Country {
        name: "Poland",
        prefix: 48,
        mcc: 260,
    },
    Country {
        name: "Germany",
        prefix: 49,
        mcc: 262,
    },
    Country {
        name: "United Kingdom",
        prefix: 44,
        mcc: 234,
    },
    Country {
        name: "United States",
        prefix: 1,
        mcc: 310,
    },
];

/// Numbers of no known country resolve to the ITU test network 001-01.
const TEST_COUNTRY: Country = Country {
    name: "Unknown",
    prefix: 0,
    mcc: 1,
};

const KYIVSTAR: Network = Network {
    name: "Kyivstar",
    prefix: 67,
    mnc: 3,
};
const VODAFONE: Network = Network {
    name: "Vodafone Ukraine (fka MTS)",
    prefix: 66,
    mnc: 1,
};
const LIFECELL: Network = Network {
    name: "lifecell",
    prefix: 63,
    mnc: 6,
};

/// Ukrainian operator codes and the operator that issued them.
const UA_CODES: [(u64, Network); 13] = [
    (39, KYIVSTAR),
    (67, KYIVSTAR),
    (68, KYIVSTAR),
    (96, KYIVSTAR),
    (97, KYIVSTAR),
    (98, KYIVSTAR),
    (50, VODAFONE),
    (66, VODAFONE),
    (95, VODAFONE),
    (99, VODAFONE),
    (63, LIFECELL),
    (73, LIFECELL),
    (93, LIFECELL),
];

/// Lookup result for `phone` (the gateway's fixture shape). Ukrainian numbers
/// with an odd last digit are ported to the next operator of
/// Kyivstar → Vodafone → lifecell → Kyivstar.
pub fn lookup(phone: u64) -> Value {
    let digits = phone.to_string();
    let country = COUNTRIES
        .iter()
        .copied()
        .find(|c| digits.starts_with(&c.prefix.to_string()))
        .unwrap_or(TEST_COUNTRY);
    let national = digits
        .get(country.prefix.to_string().len()..)
        .unwrap_or_default();
    let code: u64 = national.get(..2).and_then(|c| c.parse().ok()).unwrap_or(0);
    let generic = Network {
        name: "Sandbox Mobile",
        prefix: code,
        mnc: 1,
    };
    let origin = if country.prefix == 380 {
        UA_CODES.iter().find(|(c, _)| *c == code).map_or(
            Network { mnc: 99, ..generic },
            |(_, network)| Network {
                prefix: code,
                ..*network
            },
        )
    } else {
        generic
    };
    let ported = country.prefix == 380 && phone % 2 == 1;
    let current = if ported {
        next_operator(origin)
    } else {
        origin
    };
    let mccmnc = country.mcc * 100 + current.mnc;
    let hlr_status = match Magic::of(phone) {
        Magic::Blocked | Magic::Undeliverable => status::UNDELIVERABLE,
        _ => status::DELIVERED,
    };
    json!({
        "phone": phone,
        "status": hlr_status,
        "imsi": mccmnc * 10_000_000_000 + phone % 10_000_000_000,
        "mccmnc": mccmnc,
        "ported": ported,
        "network": {
            "origin": network_json(origin, country),
            "ported": network_json(current, country),
        },
    })
}

fn next_operator(network: Network) -> Network {
    match network.name {
        "Kyivstar" => VODAFONE,
        "Vodafone Ukraine (fka MTS)" => LIFECELL,
        _ => KYIVSTAR,
    }
}

fn network_json(network: Network, country: Country) -> Value {
    json!({
        "name": network.name,
        "prefix": network.prefix,
        "country": {"name": country.name, "prefix": country.prefix},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_number_is_kyivstar_ported_to_vodafone() {
        let hlr = lookup(380_971_234_567);
        assert_eq!(hlr["network"]["origin"]["name"], "Kyivstar");
        assert_eq!(hlr["network"]["origin"]["prefix"], 97);
        assert_eq!(hlr["network"]["ported"]["prefix"], 66);
        assert_eq!(hlr["mccmnc"], 25501);
        assert_eq!(hlr["imsi"], 255_010_971_234_567_u64);
    }
}
