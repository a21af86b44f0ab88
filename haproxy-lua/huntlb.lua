-- huntlb for HAProxy (hunt/1, see docs/protocol.md). Load with:
--
--   global
--       setenv HUNTLB_ARGS "role=front backend=hunt"
--       lua-prepend-path /usr/share/huntlb/?.lua
--       lua-load /usr/share/huntlb/huntlb.lua
--
-- (HAProxy >= 2.7 also takes the args after `lua-load FILE`; 2.6 ignores them,
-- so HUNTLB_ARGS works on both.) Args are validated at load: a bad one stops
-- HAProxy with the key named.
--
-- role=front  backend=NAME [map=FILE [every_ms=100]]
--   Registers the response action `lua.huntlb-unreachable` (a final whose agent
--   cannot reach its app marks that server down at once). The shipped front
--   offers to its least-loaded server with native rules
--   (haproxy-lua/tools/least_pick.py) and needs nothing more.
--   With map=FILE (random first candidates, the paper's SRLB), a background
--   task also keeps FILE current with the usable servers of backend
--   NAME: keys 0..n-1, each naming one of the n usable servers (huntlb/upmap.lua;
--   a change rewrites only the keys whose server changed). The config picks the
--   first candidate with native fetches and no per-request Lua, n being
--   HAProxy's own count of usable servers:
--     http-request set-var(txn.hunt_n) nbsrv
--     http-request set-var(txn.hunt_offer) rand,mod(txn.hunt_n),map_str(FILE) if { var(txn.hunt_n) -m int ge 2 } ...
--   With fewer than 2 usable servers the map is emptied and the request is not
--   offered (a retry would come back).
--   With gate_new=BACKEND[,BACKEND...] (servers that DNS names: server-template
--   slots, `init-addr none`), a server that gets an address stays in
--   maintenance until it answers one health probe (GET /.hunt/health, 200):
--   HAProxy itself would use it at once, before its first check (it leaves
--   maintenance "UP, check immediately"), and a final sent to a container not
--   yet listening has no try left. Every 50 ms a task holds every server
--   without an address (or whose address just changed) in maintenance, probes
--   the held ones that have an address, and lets in those that answer.
-- role=sidecar  [policy=dynamic] [workers=32] [id=sidecar]
--   Registers the action `lua.huntlb-sidecar`: classifies the try, and for an
--   offer applies the policy to txn.hunt_busy (set natively from srv_conn and
--   srv_queue), setting txn.hunt_refuse. An offer or a final sets txn.hunt_try:
--   its front may send it once more if no app saw it (sidecar.cfg answers
--   HAProxy's own 503 for it as `425 hunt: unreachable`). Also the service
--   `lua.huntlb-metrics`.

local policy = require "huntlb.policy"
local upmap = require "huntlb.upmap"
local metrics = require "huntlb.metrics"

local core = core
local tonumber = tonumber
local tostring = tostring
local pairs = pairs
local ipairs = ipairs
local error = error
local str_format = string.format
local str_gmatch = string.gmatch
local str_match = string.match
local tbl_sort = table.sort
local tbl_concat = table.concat
local os_getenv = os.getenv
local io_open = io.open

local _M = { _VERSION = "1" }

local NO_GATES = {}

local KNOWN = {
    front = { role = true, backend = true, map = true, every_ms = true, gate_new = true },
    sidecar = { role = true, policy = true, workers = true, id = true },
}

--- Parse "k=v k=v" (or a list of "k=v" strings) into a table, validating keys.
function _M.parse_args(list)
    local args = {}
    for _, item in ipairs(list) do
        for kv in str_gmatch(item, "%S+") do
            local k, v = str_match(kv, "^([%w_]+)=(.+)$")
            if not k then
                return nil, str_format("huntlb: arg `%s` is not key=value", kv)
            end
            if args[k] then
                return nil, str_format("huntlb: arg `%s` given twice", k)
            end
            args[k] = v
        end
    end
    local role = args.role
    if not KNOWN[role] then
        return nil, str_format("huntlb: arg `role`: `%s` is not a role (expected front or sidecar)", tostring(role))
    end
    for k in pairs(args) do
        if not KNOWN[role][k] then
            return nil, str_format("huntlb: arg `%s` is unknown for role=%s", k, role)
        end
    end
    if role == "front" then
        if not args.backend then return nil, "huntlb: arg `backend` is required with role=front" end
        if args.every_ms and not args.map then
            return nil, "huntlb: arg `every_ms` needs `map` (it is the map's refresh period)"
        end
        local every = tonumber(args.every_ms or "100")
        if not every or every < 10 or every > 60000 then
            return nil, "huntlb: arg `every_ms` must be a number from 10 to 60000"
        end
        args.every_ms = every
        if args.gate_new then
            local names = {}
            for name in str_gmatch(args.gate_new, "[^,]+") do
                names[#names + 1] = name
            end
            args.gate_new = names
        end
    else
        -- the settings every host shares: defaults and checks in huntlb.policy
        local settings, err = policy.settings(args, "sidecar")
        if not settings then
            return nil, "huntlb: arg " .. err
        end
        args.settings = settings
    end
    return args
end

-- front ----------------------------------------------------------------------

--- Names of the servers of `be` that can take traffic, sorted: the servers
--- HAProxy's `nbsrv` counts (active, not backup, weight above 0, up).
local function usable_servers(be)
    local up = {}
    for name, srv in pairs(be.servers) do
        local st = srv:get_stats()
        local status = st.status or ""
        -- "UP", "UP 1/2" (going down), "no check"; not DOWN, MAINT, DRAIN, NOLB
        if (str_match(status, "^UP") or status == "no check")
            and tonumber(st.bck) ~= 1 and (tonumber(st.weight) or 0) > 0 then
            up[#up + 1] = name
        end
    end
    tbl_sort(up)
    return up
end

--- What HAProxy loaded from the map file at start (key -> value).
local function read_map(path)
    local f = io_open(path, "r")
    if not f then return {} end -- HAProxy itself names a missing map file
    local text = f:read("a")
    f:close()
    return upmap.parse(text)
end

local function start_map_task(args)
    local published = nil
    -- key -> server name as HAProxy holds it: the file as loaded, so the first
    -- refresh deletes whatever it held that is not wanted
    local held = read_map(args.map)
    core.register_task(function()
        while true do
            local be = core.backends[args.backend]
            if be then
                local up = usable_servers(be)
                local key = tbl_concat(up, ",")
                if key ~= published then
                    local sets, dels = upmap.diff(held, upmap.wanted(up))
                    for _, kv in ipairs(sets) do
                        core.set_map(args.map, kv[1], kv[2])
                        held[kv[1]] = kv[2]
                    end
                    for _, k in ipairs(dels) do
                        core.del_map(args.map, k)
                        held[k] = nil
                    end
                    local n = #up
                    core.Info(str_format("huntlb: %d usable in backend %s: %s%s; %d keys written, %d deleted",
                        n, args.backend, key, n < 2 and " (not offering: fewer than 2)" or "",
                        #sets, #dels))
                    published = key
                end
            end
            core.msleep(args.every_ms)
        end
    end)
end

-- gate_new: HAProxy (2.6 to 3.0; `init-state down` is 3.1's) puts a server that
-- DNS has just named in service at once, before any check: leaving maintenance
-- it sets its health to `rise` ("start OK but check immediately", server.c
-- srv_update_status). The gate keeps such servers in forced maintenance until
-- one health probe of the new address answers 200.
local GATE_EVERY_MS = 50
local GATE_PATH = "/.hunt/health"

--- One health probe: true if ADDR ("ip:port") answers GATE_PATH with 200.
local function probe(addr)
    local ip, port = str_match(addr, "^(.+):(%d+)$")
    if not ip then return false end
    local s = core.tcp()
    s:settimeout(0.25)   -- the fronts' `timeout connect`
    if not s:connect(ip, tonumber(port)) then
        s:close()
        return false
    end
    s:send("GET " .. GATE_PATH .. " HTTP/1.0\r\n\r\n")
    local line = s:receive("*l")
    s:close()
    return line ~= nil and str_match(line, "^HTTP/1%.%d 200") ~= nil
end

--- The gate's state for backends NAMES: `held` (servers it keeps in
--- maintenance), `seen` (the address each other server had). `sweep(go)`
--- first holds (no I/O, so a probe never delays a hold), then, with go true
--- (not at init), probes the held servers that have an address, each address once.
function _M.gate(names, probe_fn)
    local held, seen, failed = {}, {}, {}
    local g = { held = held, seen = seen }
    function g.sweep(go)
        local named = {}
        for _, bname in ipairs(names) do
            local be = core.backends[bname]
            for sname, srv in pairs(be and be.servers or {}) do
                local key = bname .. "/" .. sname
                local addr = srv:get_addr()
                if addr == "<unknown>" then
                    -- no address (yet, or DNS dropped it): hold it before DNS fills it
                    if not held[key] then
                        srv:set_maint()
                        held[key] = true
                    end
                    seen[key], failed[key] = nil, nil
                else
                    if not held[key] and seen[key] and seen[key] ~= addr then
                        -- the address changed in place (one container for another): hold it
                        srv:set_maint()
                        held[key] = true
                        core.Info(str_format("huntlb: %s now %s (was %s): held until it answers a health probe",
                            key, addr, seen[key]))
                    end
                    seen[key] = addr
                    if held[key] then
                        named[#named + 1] = { key, srv, addr }
                    end
                end
            end
        end
        if not go then return end
        -- one probe per address per sweep: the same container fills a slot in
        -- each backend, and a silent one costs the probe's timeout
        local answered = {}
        for _, n in ipairs(named) do
            local key, srv, addr = n[1], n[2], n[3]
            if answered[addr] == nil then
                answered[addr] = probe_fn(addr)
            end
            if answered[addr] then
                srv:set_ready()
                held[key] = nil
                core.Info(str_format("huntlb: %s (%s) answered a health probe: in service (%d probes unanswered before)",
                    key, addr, failed[key] or 0))
                failed[key] = nil
            else
                failed[key] = (failed[key] or 0) + 1
            end
        end
    end
    return g
end

local function start_gate(args)
    local g = _M.gate(args.gate_new, probe)
    core.register_init(function()
        for _, name in ipairs(args.gate_new) do
            if not core.backends[name] then
                error(str_format("huntlb: arg `gate_new`: no backend named `%s`", name))
            end
        end
        -- before the first DNS answer: every slot without an address is held
        g.sweep(false)
    end)
    core.register_task(function()
        while true do
            g.sweep(true)
            core.msleep(GATE_EVERY_MS)
        end
    end)
end

local function start_front(args)
    if args.gate_new then
        start_gate(args)
    end
    if args.map then
        start_map_task(args)
    end
    core.register_init(function()
        if not core.backends[args.backend] then
            error(str_format("huntlb: arg `backend`: no backend named `%s`", args.backend))
        end
    end)

    -- A final answered `425 hunt: unreachable`: that server's agent cannot reach
    -- its app. Mark it down now, not two health checks (~1 s) later: HAProxy
    -- cannot re-send the final (its third try could be taken for the offer), so
    -- every final sent there meanwhile would fail. Runs only on that answer;
    -- the health checks bring the server back once its app answers.
    core.register_action("huntlb-unreachable", { "http-res" }, function(txn)
        local be = core.backends[txn.sf:be_name()]
        local srv = be and be.servers[txn.sf:srv_name()]
        if srv then
            srv:check_force_down()
            core.Warning(str_format("huntlb: %s/%s answered hunt: unreachable (its app is down): marked down",
                txn.sf:be_name(), txn.sf:srv_name()))
        end
    end, 0)
end

-- sidecar --------------------------------------------------------------------

--- The sidecar's metrics as samples for huntlb.metrics (names from its table).
function _M.sidecar_samples(counts, p, workers, busy)
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

local function start_sidecar(args)
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
        local body = metrics.render(_M.sidecar_samples(counts, p, workers, busy))
        applet:set_status(200)
        applet:add_header("content-type", "text/plain; version=0.0.4")
        applet:add_header("content-length", tostring(#body))
        applet:start_response()
        applet:send(body)
    end)
end

-- load -----------------------------------------------------------------------

function _M.start(list)
    local args, err = _M.parse_args(list)
    if not args then
        error(err, 0)
    end
    if args.role == "front" then
        start_front(args)
    else
        start_sidecar(args)
    end
    return args
end

-- Under HAProxy: args from `lua-load FILE ARGS...` (>= 2.7) or HUNTLB_ARGS.
if core and core.register_action then
    local list = { ... }
    if #list == 0 then
        list = { os_getenv("HUNTLB_ARGS") or "" }
    end
    _M.start(list)
end

return _M
