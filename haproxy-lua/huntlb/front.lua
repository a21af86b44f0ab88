-- role=front: the response action `lua.huntlb-unreachable`, and the map task
-- and DNS gate when asked for.
local gate = require "huntlb.gate"
local maptask = require "huntlb.maptask"

local core = core
local error = error
local str_format = string.format

local _M = {}

function _M.start(args)
    if args.gate_new then
        gate.start(args)
    end
    if args.map then
        maptask.start(args)
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

return _M
