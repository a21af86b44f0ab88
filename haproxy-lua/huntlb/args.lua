-- huntlb's arguments (`HUNTLB_ARGS` or `lua-load FILE ARGS...`): "k=v" words,
-- validated at load, each error naming the key. The sidecar's shared settings
-- (policy, workers, id) are checked by huntlb.policy, as every host does.
local policy = require "huntlb.policy"

local tonumber = tonumber
local tostring = tostring
local pairs = pairs
local ipairs = ipairs
local str_format = string.format
local str_gmatch = string.gmatch
local str_match = string.match

local _M = {}

local KNOWN = {
    front = { role = true, backend = true, map = true, every_ms = true, gate_new = true },
    sidecar = { role = true, policy = true, workers = true, id = true },
}

--- Parse "k=v k=v" (or a list of "k=v" strings) into a table, validating keys.
function _M.parse(list)
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

return _M
