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

parse_value = function(s, i)
    i = skip(s, i)
    local c = string.sub(s, i, i)
    if c == "{" then
        local obj = {}
        i = skip(s, i + 1)
        if string.sub(s, i, i) == "}" then return obj, i + 1 end
        while true do
            local k
            k, i = parse_string(s, skip(s, i))
            i = skip(s, i)
            assert(string.sub(s, i, i) == ":", "expected : at " .. i)
            obj[k], i = parse_value(s, i + 1)
            i = skip(s, i)
            local d = string.sub(s, i, i)
            if d == "}" then return obj, i + 1 end
            assert(d == ",", "expected , at " .. i)
            i = i + 1
        end
    elseif c == "[" then
        local arr = {}
        i = skip(s, i + 1)
        if string.sub(s, i, i) == "]" then return arr, i + 1 end
        while true do
            arr[#arr + 1], i = parse_value(s, i)
            i = skip(s, i)
            local d = string.sub(s, i, i)
            if d == "]" then return arr, i + 1 end
            assert(d == ",", "expected , at " .. i)
            i = i + 1
        end
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
