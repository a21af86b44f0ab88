-- Minimal JSON decoder for the standalone tests (objects, arrays, strings without
-- unicode escapes, numbers, booleans, null). Test-only: the module never parses JSON.
local M = {}

local function skip(s, i)
    return (string.find(s, "[^ \t\r\n]", i)) or #s + 1
end

local parse_value

local function parse_string(s, i)
    local out, j = {}, i + 1
    while true do
        local c = string.sub(s, j, j)
        if c == "" then error("unterminated string at " .. i) end
        if c == '"' then return table.concat(out), j + 1 end
        if c == "\\" then
            local e = string.sub(s, j + 1, j + 1)
            local map = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", n = "\n", t = "\t", r = "\r", b = "\b", f = "\f" }
            if not map[e] then error("unsupported escape \\" .. e .. " at " .. j) end
            out[#out + 1] = map[e]
            j = j + 2
        else
            out[#out + 1] = c
            j = j + 1
        end
    end
end

-- The items of an object or an array, from its opening character at i to
-- `close`, each read by item(j) (which returns where it ended), separated
-- by commas; returns the index past `close`.
local function parse_items(s, i, close, item)
    i = skip(s, i + 1)
    if string.sub(s, i, i) == close then return i + 1 end
    while true do
        i = skip(s, item(i))
        local d = string.sub(s, i, i)
        if d == close then return i + 1 end
        assert(d == ",", "expected , at " .. i)
        i = i + 1
    end
end

parse_value = function(s, i)
    i = skip(s, i)
    local c = string.sub(s, i, i)
    if c == "{" then
        local obj = {}
        return obj, parse_items(s, i, "}", function(j)
            local k
            k, j = parse_string(s, skip(s, j))
            j = skip(s, j)
            assert(string.sub(s, j, j) == ":", "expected : at " .. j)
            obj[k], j = parse_value(s, j + 1)
            return j
        end)
    elseif c == "[" then
        local arr = {}
        return arr, parse_items(s, i, "]", function(j)
            arr[#arr + 1], j = parse_value(s, j)
            return j
        end)
    elseif c == '"' then
        return parse_string(s, i)
    elseif string.sub(s, i, i + 3) == "true" then
        return true, i + 4
    elseif string.sub(s, i, i + 4) == "false" then
        return false, i + 5
    elseif string.sub(s, i, i + 3) == "null" then
        return nil, i + 4
    end
    local num = string.match(s, "^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if not num or num == "" then error("unexpected `" .. c .. "` at " .. i) end
    return math.tointeger(tonumber(num)) or tonumber(num), i + #num
end

function M.decode(s)
    local v, i = parse_value(s, 1)
    i = skip(s, i)
    if i <= #s then error("trailing data at " .. i) end
    return v
end

return M
