-- role=sidecar: the action `lua.huntlb-sidecar` (classify the try; for an
-- offer, the policy on txn.hunt_busy) and the service `lua.huntlb-metrics`.
local policy = require "huntlb.policy"
local metrics = require "huntlb.metrics"

local core = core
local tonumber = tonumber
local tostring = tostring

-- no gates: HAProxy itself drains and health-checks the sidecar
local NO_GATES = {}

local _M = {}

--- The sidecar's metrics as samples for huntlb.metrics (names from its table).
function _M.samples(counts, p, workers, busy)
    return {
        huntlb_offers_total = { accept = counts.offers_accept, refuse = counts.offers_refuse },
        huntlb_finals_total = counts.finals,
        huntlb_finals_busy_total = counts.finals_busy,
        huntlb_plain_total = counts.plain,
        huntlb_malformed_total = counts.malformed,
        huntlb_workers = workers,
        huntlb_busy = busy,
        huntlb_policy_c = p:threshold(), -- nil for `always`: left out
    }
end

function _M.start(args)
    -- once, at load: a policy key taken under its old name
    if args.settings.warning then
        core.Warning("huntlb: arg " .. args.settings.warning)
    end
    local p = args.settings.policy
    local workers = args.settings.workers
    local counts = { offers_accept = 0, offers_refuse = 0, finals = 0, finals_busy = 0, plain = 0, malformed = 0 }
    local empty = {}

    -- HAProxy lists header values 0-indexed; make them a plain list.
    local function values(h)
        if not h then return empty end
        local out = {}
        for i = 0, #h do
            if h[i] ~= nil then out[#out + 1] = h[i] end
        end
        return out
    end

    core.register_action("huntlb-sidecar", { "http-req" }, function(txn)
        local hdrs = txn.http:req_get_headers()
        local class = policy.classify(values(hdrs["hunt-offer"]), values(hdrs["hunt-target"]),
            values(hdrs["x-envoy-attempt-count"]))
        if class == "offer" or class == "final" then
            txn:set_var("txn.hunt_try", true)
        end
        if class == "offer" then
            local busy = tonumber(txn:get_var("txn.hunt_busy")) or 0
            -- no gates: HAProxy itself drains and health-checks this sidecar
            local seen = policy.parse_seen(values(hdrs["hunt-seen"]))
            -- A front that cannot say what it counts here names itself
            -- (hunt-front, Envoy); the config counts its requests in flight
            -- here natively (a stick table's trackers, this one left out).
            if seen == nil and policy.parse_front(values(hdrs["hunt-front"])) then
                seen = tonumber(txn:get_var("txn.hunt_front_seen"))
            end
            if p:admit("offer", NO_GATES, busy, workers, seen) == "accept" then
                counts.offers_accept = counts.offers_accept + 1
            else
                counts.offers_refuse = counts.offers_refuse + 1
                txn:set_var("txn.hunt_refuse", true)
            end
        elseif class == "final" then
            counts.finals = counts.finals + 1
            -- accepted while busy: the scaling signal
            if p:is_busy(tonumber(txn:get_var("txn.hunt_busy")) or 0) then
                counts.finals_busy = counts.finals_busy + 1
            end
        else
            counts[class] = counts[class] + 1
        end
    end, 0)

    core.register_service("huntlb-metrics", "http", function(applet)
        local busy = tonumber(applet:get_var("txn.hunt_busy")) or 0
        local body = metrics.render(_M.samples(counts, p, workers, busy))
        applet:set_status(200)
        applet:add_header("content-type", "text/plain; version=0.0.4")
        applet:add_header("content-length", tostring(#body))
        applet:start_response()
        applet:send(body)
    end)
end

return _M
