-- huntlb.policy: service-hunting acceptance policies (hunt/1), pure Lua.
--
-- The Lua twin of the Rust crate `huntlb-policy`; both are held to the JSON
-- vectors in policy/vectors/. No I/O and no HAProxy calls here: the HAProxy
-- adapter (huntlb.lua) feeds it the load and acts on the decision.
--
--   local policy = require "huntlb.policy"
--   local p = policy.new("dynamic:window=50")   -- error() naming the bad key
--   if p:decide("offer", busy, workers) then ... end
--
-- Runs on Lua 5.3 and 5.4. Writes no globals.

local tonumber = tonumber
local tostring = tostring
local setmetatable = setmetatable
local error = error
local str_match = string.match
local str_gmatch = string.gmatch
local str_format = string.format
local table_concat = table.concat

local _M = { _VERSION = "1" }
local mt = { __index = _M }

local MAX_C = 65535
local MAX_WINDOW = 10000

local function trim(s)
    return str_match(s, "^%s*(.-)%s*$")
end

-- Same number grammar as the Rust crate: plain digits, optional fraction.
local function parse_c(key, v)
    v = trim(v)
    local n = str_match(v, "^%d+$") and tonumber(v)
    if not n or n > MAX_C then
        return nil, str_format("policy key `%s`: `%s` is not a whole number from 0 to %d", key, v, MAX_C)
    end
    return n
end

local function parse_ratio(key, v)
    v = trim(v)
    local ok = str_match(v, "^%d+$") or str_match(v, "^%d+%.%d+$")
    local r = ok and tonumber(v)
    if not r or r < 0 or r > 1 then
        return nil, str_format("policy key `%s`: `%s` is not a ratio from 0 to 1", key, v)
    end
    return r + 0.0
end

local function parse_window(key, v)
    v = trim(v)
    local w = str_match(v, "^%d+$") and tonumber(v)
    if not w or w < 1 or w > MAX_WINDOW then
        return nil, str_format("policy key `%s`: `%s` is not a whole number from 1 to %d", key, v, MAX_WINDOW)
    end
    return w
end

local function fail(key, reason)
    return nil, str_format("policy key `%s`: %s", key, reason), key
end

-- Keys renamed since specs were first written (old -> new), as in the Rust
-- crate: the old name parses to the same policy, and _M.warning gives the line
-- the host logs once at load about it.
local RENAMED = { slack = "seen_margin" }

local function parse_dynamic(args)
    local p = { kind = "dynamic", window = 50, low = 0.4, high = 0.6, c0 = 1, c_max = nil, c_min = 0, seen_margin = nil }
    -- each key by its current name -> the name it was written under
    local given = {}
    -- split on commas, keeping empty pieces so "a=1," is an error like in Rust
    for kv in str_gmatch(args .. ",", "([^,]*),") do
        local k, v = str_match(kv, "^([^=]*)=(.*)$")
        if not k then
            return fail("policy", "`" .. kv .. "` is not key=value")
        end
        k = trim(k)
        if k == "" then
            -- an error must name a key: the whole spec's, as for a piece without "="
            return fail("policy", "`" .. kv .. "` has no key before `=`")
        end
        -- an old name and its new one are one key: given both, it is given twice
        local name = RENAMED[k] or k
        local first = given[name]
        if first == k then
            return fail(k, "given twice")
        elseif first then
            -- named by its current name, as the agent names a renamed key given twice
            return fail(name, str_format("given twice, as `%s` and as `%s` (one key, renamed)", first, k))
        end
        given[name] = k
        local val, err
        if name == "window" then
            val, err = parse_window(k, v)
        elseif name == "low" or name == "high" then
            val, err = parse_ratio(k, v)
        elseif name == "c0" or name == "c_max" or name == "c_min" or name == "seen_margin" then
            val, err = parse_c(k, v)
        else
            return fail(k, "unknown key (expected window, low, high, c0, c_max, c_min, seen_margin)")
        end
        if err then
            return nil, err, k
        end
        p[name] = val
    end
    if p.low >= p.high then
        return fail("low", str_format("low (%s) must be below high (%s)", tostring(p.low), tostring(p.high)))
    end
    if p.c_max and p.c0 > p.c_max then
        return fail("c0", str_format("c0 (%d) is above c_max (%d)", p.c0, p.c_max))
    end
    if p.c_max and p.c_min > p.c_max then
        return fail("c_min", str_format("c_min (%d) is above c_max (%d)", p.c_min, p.c_max))
    end
    return p
end

--- Parse a policy spec (`always`, `static:C`, `dynamic[:k=v,...]`).
-- Returns the parameter table, or nil, a message, and the offending key.
function _M.parse(spec)
    if type(spec) ~= "string" then
        return fail("policy", "expected a string, got " .. type(spec))
    end
    spec = trim(spec)
    local name, args = str_match(spec, "^([^:]*):(.*)$")
    if not name then
        name = spec
    end
    if name == "always" then
        if args then
            return fail("policy", "`always` takes no parameters")
        end
        return { kind = "always" }
    elseif name == "static" then
        if not args then
            return fail("c", "missing: write static:C, e.g. static:4")
        end
        local c, err = parse_c("c", args)
        if not c then
            return nil, err, "c"
        end
        return { kind = "static", c = c }
    elseif name == "dynamic" then
        if not args then
            return { kind = "dynamic", window = 50, low = 0.4, high = 0.6, c0 = 1, c_min = 0 }
        end
        return parse_dynamic(args)
    end
    return fail("policy", "unknown policy `" .. name .. "` (expected always, static:C or dynamic[:k=v,...])")
end

--- The line a host logs once at load about a spec that uses an old key name
-- (`slack` for `seen_margin`), or nil: the same text as the Rust crate's
-- `spec_warning` (policy/vectors/specs.json holds both to it).
function _M.warning(spec)
    if type(spec) ~= "string" then
        return nil
    end
    local args = str_match(trim(spec), "^dynamic:(.*)$")
    if not args then
        return nil
    end
    local out = {}
    for kv in str_gmatch(args .. ",", "([^,]*),") do
        local k = str_match(kv, "^([^=]*)=")
        local new = k and RENAMED[trim(k)]
        if new then
            out[#out + 1] = str_format("policy key `%s` is deprecated: write `%s` (same meaning)", trim(k), new)
        end
    end
    if #out == 0 then
        return nil
    end
    return table_concat(out, "; ")
end

--- A policy instance with its own state. Raises an error naming the bad key.
function _M.new(spec)
    local p, err = _M.parse(spec)
    if not p then
        error(err, 2)
    end
    local self = { p = p, attempt = 0, accepted = 0 }
    if p.kind == "static" then
        self.c = p.c
    elseif p.kind == "dynamic" then
        self.c = p.c0 > p.c_min and p.c0 or p.c_min
    end
    return setmetatable(self, mt)
end

--- Decide on one try. `try` is "offer" or "final"; busy and workers are integers;
-- seen (optional) is the front's hunt-seen on an offer (see seen_margin in the Rust crate).
-- Returns true to accept, false to refuse. Finals are always accepted.
function _M.decide(self, try, busy, workers, seen)
    if try ~= "offer" then
        return true
    end
    local p = self.p
    local kind = p.kind
    if kind == "always" then
        return true
    elseif kind == "static" then
        return busy < self.c
    end
    -- an offer the front counted right is accepted outside the window
    if p.seen_margin and seen and busy <= seen + p.seen_margin then
        return true
    end
    -- SR_dyn, Algorithm 2 step for step (see the Rust crate for the window note)
    local attempt = self.attempt + 1
    if attempt == p.window then
        local ratio = self.accepted / p.window
        local ceiling = workers
        if p.c_max and p.c_max < ceiling then
            ceiling = p.c_max
        end
        if ratio < p.low and self.c < ceiling then
            self.c = self.c + 1
        elseif ratio > p.high and self.c > p.c_min then
            self.c = self.c - 1
        end
        attempt = 0
        self.accepted = 0
    end
    self.attempt = attempt
    if busy < self.c then
        self.accepted = self.accepted + 1
        return true
    end
    return false
end

-- admission: the host's gates, then the policy (policy/src/admission.rs) -----

--- Decide one try with the host's gates first. `gates` may hold draining,
-- app_down, at_capacity (absent: open). Returns "accept", "overloaded" (a try
-- that may not be refused, at capacity: an error, never a refusal), or
-- "refuse" and the reason (policy, draining, app_down, overload). A gate that
-- refuses does not advance the policy's state.
function _M.admit(self, try, gates, busy, workers, seen)
    if try ~= "offer" then
        return gates.at_capacity and "overloaded" or "accept"
    end
    if gates.draining then return "refuse", "draining" end
    if gates.app_down then return "refuse", "app_down" end
    if gates.at_capacity then return "refuse", "overload" end
    if self:decide(try, busy, workers, seen) then
        return "accept"
    end
    return "refuse", "policy"
end

-- hunt/1 try classification (docs/protocol.md section 2) --------------------

local MAX_MARK_LEN = 64

--- RFC 9110 token, 1 to 64 bytes.
local function is_token(v)
    local n = #v
    return n > 0 and n <= MAX_MARK_LEN and str_match(v, "^[%w!#$%%&'*+%-.^_`|~]+$") ~= nil
end
_M.is_token = is_token

--- Classify a try from the values of hunt-offer and hunt-target, each given as
-- a list of the values received (empty: absent), and optionally of Envoy's
-- x-envoy-attempt-count, the per-try mark when hunt-target is absent. Returns
-- "offer", "final", "plain" or "malformed"; only "offer" may be refused.
function _M.classify(offer, target, attempt)
    if #target == 0 and attempt then
        target = attempt
    end
    local no, nt = #offer, #target
    if no == 0 and nt == 0 then
        return "plain"
    end
    if no > 1 or nt > 1 then
        return "malformed"
    end
    if no == 1 and nt == 1 then
        local o, t = offer[1], target[1]
        if not (is_token(o) and is_token(t)) then
            return "malformed"
        end
        return o == t and "offer" or "final"
    end
    local v = offer[1] or target[1]
    return is_token(v) and "final" or "malformed"
end

--- hunt-seen as the policy takes it (protocol::parse_seen): the list of values
-- received; a number for one value of 1 to 9 plain digits, else nil (the offer
-- is then decided as if the front had sent none).
function _M.parse_seen(values)
    if #values ~= 1 then
        return nil
    end
    local v = values[1]
    if #v < 1 or #v > 9 or not str_match(v, "^%d+$") then
        return nil
    end
    return tonumber(v)
end

--- hunt-front as the agent takes it (protocol::parse_front): the list of values
--- received; the name for one value of 1 to 64 visible ASCII bytes with no
--- comma, else nil (the try then counts for no front).
function _M.parse_front(values)
    if #values ~= 1 then
        return nil
    end
    local v = values[1]
    -- \33-\43 and \45-\126: visible ASCII but the comma (\44)
    if #v < 1 or #v > MAX_MARK_LEN or not str_match(v, "^[\33-\43\45-\126]+$") then
        return nil
    end
    return v
end

--- The threshold in effect (nil for `always`).
function _M.threshold(self)
    return self.c
end

--- Whether `busy` is at or above the threshold in effect: an offer would be
-- refused now, and a final arriving now is accepted while busy (the scaling
-- signal, huntlb_finals_busy_total). Never for `always`.
function _M.is_busy(self, busy)
    return self.c ~= nil and busy >= self.c
end

-- settings every host shares (policy/src/settings.rs) ------------------------

local DEFAULT_POLICY = "dynamic:seen_margin=1"
local DEFAULT_WORKERS = 32
local MAX_WORKERS = 65535

--- Validate the shared settings from text args (policy, workers, id; absent
-- take the defaults, the id `default_id`). Returns { policy = instance,
-- workers = n, id = s, warning = line to log once at load or nil (a policy
-- key under its old name) }, or nil, a message and the offending key.
function _M.settings(args, default_id)
    local spec = args.policy or DEFAULT_POLICY
    local _, perr = _M.parse(spec)
    if perr then
        return nil, "`policy`: " .. perr, "policy"
    end
    local w = args.workers
    local workers = DEFAULT_WORKERS
    if w ~= nil then
        workers = str_match(w, "^%d+$") and #w <= 9 and tonumber(w)
        if not workers then
            return nil, str_format("`workers`: `%s` is not a whole number", w), "workers"
        end
        if workers < 1 or workers > MAX_WORKERS then
            return nil, str_format("`workers`: %d is out of range (1 to %d)", workers, MAX_WORKERS), "workers"
        end
    end
    local id = args.id or default_id
    if not is_token(id) then
        return nil, str_format("`id`: `%s` must be 1-64 token characters", id), "id"
    end
    local warning = _M.warning(args.policy)
    if warning then
        warning = "`policy`: " .. warning
    end
    return { policy = _M.new(spec), workers = workers, id = id, warning = warning }
end

return _M
