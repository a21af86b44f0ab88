//! Envoy's own answer for a try it never sent to the app, told apart from an
//! app's answer. A sidecar Envoy that cannot connect to its app answers with
//! a local reply, a 503 like an app's own; proxy-wasm shows the difference in
//! the stream's response flags (`get_property(["response", "flags"])`, Envoy's
//! `StreamInfo::legacyResponseFlags`: bit `n` is `CoreResponseFlag` number `n`,
//! serialized as an int64, 8 bytes little-endian). An app's answer carries
//! neither flag below (`response.code_details` is then `via_upstream`).

/// `CoreResponseFlag::NoHealthyUpstream` (`UH`): no app host to send to.
pub const NO_HEALTHY_UPSTREAM: u64 = 1 << 1;
/// `CoreResponseFlag::UpstreamConnectionFailure` (`UF`): the connection to the
/// app failed, so nothing of the request was written to it.
pub const UPSTREAM_CONNECTION_FAILURE: u64 = 1 << 5;

/// The flags property as proxy-wasm hands it over; `None` if it is not an int64.
pub fn parse_flags(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Whether a response with this status and these flags is Envoy's own reply
/// for a request no app saw: the only answers a sidecar may turn into
/// `425 hunt: unreachable`. Anything after a connection (a reset, a timeout,
/// an app's own 503) may have reached the app and is never one.
pub fn reached_no_app(status: u16, flags: u64) -> bool {
    status == 503 && flags & (NO_HEALTHY_UPSTREAM | UPSTREAM_CONNECTION_FAILURE) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_envoys_503_for_no_connection_reached_no_app() {
        assert!(reached_no_app(503, UPSTREAM_CONNECTION_FAILURE));
        assert!(reached_no_app(503, NO_HEALTHY_UPSTREAM));
        // an app's 503: no flags
        assert!(!reached_no_app(503, 0));
        // UpstreamRequestTimeout (504), UpstreamRemoteReset, UpstreamConnectionTermination,
        // UpstreamOverflow: the request may have reached the app, or is a capacity answer
        for bit in [2, 4, 6, 7] {
            assert!(!reached_no_app(503, 1 << bit), "bit {bit}");
        }
        assert!(!reached_no_app(504, UPSTREAM_CONNECTION_FAILURE));
    }

    #[test]
    fn flags_are_an_int64_little_endian() {
        assert_eq!(parse_flags(&32i64.to_le_bytes()), Some(UPSTREAM_CONNECTION_FAILURE));
        assert_eq!(parse_flags(b"UF"), None);
        assert_eq!(parse_flags(b""), None);
    }
}
