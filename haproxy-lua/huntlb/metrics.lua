-- huntlb.metrics: every metric name huntlb exports, the Lua mirror of the
-- Rust table `huntlb_policy::metrics` (both held to policy/vectors/metrics.json),
-- and Prometheus text rendering for the sidecar.
--
--   local metrics = require "huntlb.metrics"
--   metrics.render({ huntlb_finals_total = 3, huntlb_offers_total = { accept = 1, refuse = 2 } })
--
-- Runs on Lua 5.3 and 5.4. Writes no globals.

local ipairs = ipairs
local pairs = pairs
local error = error
local str_format = string.format
local tbl_concat = table.concat

local _M = { _VERSION = "1" }

local function m(name, kind, sidecar, label, values)
    return { name = name, kind = kind, sidecar = sidecar, label = label, values = values }
end

-- Same order as the Rust table.
_M.ALL = {
    m("huntlb_offers_total", "counter", true, "decision", { "accept", "refuse" }),
    m("huntlb_refusals_total", "counter", false, "reason", { "policy", "app_down", "draining", "overload" }),
    m("huntlb_refusals_closed_total", "counter", false),
    m("huntlb_finals_total", "counter", true),
    m("huntlb_finals_busy_total", "counter", true),
    m("huntlb_plain_total", "counter", true),
    m("huntlb_malformed_total", "counter", true),
    m("huntlb_health_checks_total", "counter", false),
    m("huntlb_tls_handshake_failures_total", "counter", false),
    m("huntlb_app_errors_total", "counter", false, "kind", { "connect", "timeout", "other" }),
    m("huntlb_app_resends_total", "counter", false),
    m("huntlb_apache_polls_total", "counter", false, "result", { "ok", "failed" }),
    m("huntlb_llm_prefill_seats", "gauge", false),
    m("huntlb_llm_prefix_total", "counter", false, "outcome", { "home", "ordinary", "none" }),
    m("huntlb_llm_kv_usage_ratio", "gauge", false),
    m("huntlb_llm_kv_full", "gauge", false),
    m("huntlb_llm_kv_polls_total", "counter", false, "result", { "ok", "failed", "rejected" }),
    m("huntlb_forwards_total", "counter", false, "outcome", { "sent", "unreachable", "refused", "withdrawn", "failed" }),
    m("huntlb_forwards_in_total", "counter", false, "outcome", { "taken", "withdrawn" }),
    m("huntlb_fleet_peers", "gauge", false),
    m("huntlb_fleet_peers_benched", "gauge", false),
    m("huntlb_fleet_peers_unheard", "gauge", false),
    m("huntlb_fleet_members", "gauge", false),
    m("huntlb_fleet_peers_wanting", "gauge", false),
    m("huntlb_fleet_reports_sent_total", "counter", false),
    m("huntlb_fleet_reports_taken_total", "counter", false),
    m("huntlb_fleet_reports_bad_total", "counter", false, "reason", { "stranger", "malformed", "unauthenticated", "replayed", "unproven", "version" }),
    m("huntlb_inflight", "gauge", false),
    m("huntlb_busy", "gauge", true),
    m("huntlb_workers", "gauge", true),
    m("huntlb_policy_c", "gauge", true),
    m("huntlb_app_up", "gauge", false),
    m("huntlb_app_stalled", "gauge", false),
    m("huntlb_draining", "gauge", false),
    m("huntlb_connections", "gauge", false),
    m("huntlb_connections_max", "gauge", false),
    m("huntlb_build_info", "gauge", false, "version", {}),
    m("huntlb_request_duration_seconds", "histogram", false),
}

--- Prometheus text for `samples` (name -> number, or for a labelled metric
-- label value -> number), in table order; names not in the table raise, names
-- absent from `samples` are left out.
function _M.render(samples)
    local known, out = {}, {}
    for _, def in ipairs(_M.ALL) do
        known[def.name] = true
        local v = samples[def.name]
        if v ~= nil then
            out[#out + 1] = str_format("# TYPE %s %s", def.name, def.kind)
            if def.label then
                for _, lv in ipairs(def.values) do
                    out[#out + 1] = str_format('%s{%s="%s"} %d', def.name, def.label, lv, v[lv] or 0)
                end
            else
                out[#out + 1] = str_format("%s %d", def.name, v)
            end
        end
    end
    for name in pairs(samples) do
        if not known[name] then error("huntlb.metrics: `" .. name .. "` is not in the table", 2) end
    end
    return tbl_concat(out, "\n") .. "\n"
end

return _M
