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

local args_mod = require "huntlb.args"
local front = require "huntlb.front"
local gate = require "huntlb.gate"
local sidecar = require "huntlb.sidecar"

local core = core
local error = error
local os_getenv = os.getenv

-- A loader: each job has a module of its own (huntlb/args.lua, front.lua,
-- maptask.lua, gate.lua, sidecar.lua, over policy.lua, upmap.lua, metrics.lua).
local _M = {
    _VERSION = "1",
    parse_args = args_mod.parse,
    gate = gate.gate,
    sidecar_samples = sidecar.samples,
}

-- load -----------------------------------------------------------------------

function _M.start(list)
    local args, err = args_mod.parse(list)
    if not args then
        error(err, 0)
    end
    if args.role == "front" then
        front.start(args)
    else
        sidecar.start(args)
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
