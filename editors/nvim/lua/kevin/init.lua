-- kevin-agent for Neovim 0.7+: starts `kevin lsp` for Python buffers and adds :Kevin* commands.
--   require('kevin').setup{ settings = { backend = 'openai', baseUrl = 'http://localhost:8000/v1',
--                                        model = 'cognition-ai/Kevin-32B', trajectories = 4, turns = 4 } }
-- With the default cmd, the project's own .venv/bin/kevin (or venv/bin/kevin) is used when it
-- exists, so Neovim need not be started from an activated virtual environment.
local M = {}

M.VENVS = { '.venv', 'venv' }  -- project folders searched for bin/kevin

M.config = {
  cmd = { 'kevin', 'lsp' },   -- 'kevin' (the default) is looked up in the project's venv first
  filetypes = { 'python' },
  settings = {},      -- the "kevin" section: backend, baseUrl, model, trajectories, turns
  handlers = {},      -- extra LSP handlers (merged over the defaults below)
  on_attach = nil,
  codelens = true,    -- refresh code lenses on enter / after writes
}

local client_id = nil

M.DEPRECATED = { endpoint = 'baseUrl' }  -- old setting name -> its name now (the CLI's --base-url)

-- The settings sent to the server: old names read as their new ones (a new name set wins), and a
-- note naming the old names in use (nil when none).
function M.server_settings(settings)
  local sent, renames = vim.deepcopy(settings or {}), {}
  for old, new in pairs(M.DEPRECATED) do
    if sent[old] ~= nil then
      if sent[new] == nil then
        sent[new] = sent[old]
      end
      sent[old] = nil
      table.insert(renames, string.format('settings.%s -> settings.%s', old, new))
    end
  end
  if #renames == 0 then
    return sent, nil
  end
  return sent, 'kevin: rename the deprecated ' .. table.concat(renames, ', ')
    .. " (as the CLI's --base-url and the config's base_url)"
end

local function notify(msg, level)
  vim.notify(msg, level or vim.log.levels.INFO)
end

-- Neovim 0.7 has no window/showDocument handler: open the file, focused or in the background.
local function show_document(_, params)
  local fname = vim.uri_to_fname(params.uri)
  if params.takeFocus then
    vim.cmd('edit ' .. vim.fn.fnameescape(fname))
  else
    vim.fn.bufload(vim.fn.bufadd(fname))
  end
  return { success = true }
end

local function root_dir(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  local dir = vim.fn.fnamemodify(name, ':p:h')
  local git = vim.fn.finddir('.git', dir .. ';')
  if git ~= '' then
    return vim.fn.fnamemodify(git, ':p:h:h')
  end
  return dir
end

-- The command that starts the server for a project rooted at `root`: the configured one, with a
-- bare 'kevin' resolved to <root>/.venv/bin/kevin (or venv/) when that exists. nil, reason when
-- no `kevin` can be found at all.
function M.server_cmd(root)
  local cmd = M.config.cmd
  if cmd[1] ~= 'kevin' then
    return cmd
  end
  for _, venv in ipairs(M.VENVS) do
    local found = root .. '/' .. venv .. '/bin/kevin'
    if vim.fn.executable(found) == 1 then
      return vim.list_extend({ found }, vim.list_slice(cmd, 2))
    end
  end
  if vim.fn.executable('kevin') == 1 then
    return cmd
  end
  return nil, string.format('kevin: no `kevin` on PATH nor in %s/.venv/bin: activate the virtual '
    .. 'environment kevin-agent is installed in, or pass cmd = { "/path/to/kevin", "lsp" } to setup', root)
end

local function client()
  return client_id and vim.lsp.get_client_by_id(client_id) or nil
end

-- Only once the server has answered `initialize`: on 0.7 a code lens request no server can take
-- leaves the buffer's refresh marked busy for good.
local function refresh_lenses()
  local c = client()
  if M.config.codelens and c and c.server_capabilities and c.server_capabilities.codeLensProvider then
    vim.lsp.codelens.refresh()
  end
end
M.refresh_lenses = refresh_lenses

function M.start(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  if not client() then
    local root = root_dir(bufnr)
    local cmd, problem = M.server_cmd(root)
    if not cmd then
      if not M.warned then  -- once, not for every Python buffer opened
        M.warned = true
        notify(problem, vim.log.levels.ERROR)
      end
      return nil
    end
    local handlers = vim.tbl_extend('force', { ['window/showDocument'] = show_document },
      M.config.handlers or {})
    local settings, note = M.server_settings(M.config.settings)
    if note then
      notify(note, vim.log.levels.WARN)
    end
    client_id = vim.lsp.start_client({
      name = 'kevin',
      cmd = cmd,
      root_dir = root,
      init_options = { kevin = settings },
      settings = { kevin = settings },
      handlers = handlers,
      on_attach = function(c, b)
        refresh_lenses()
        if M.config.on_attach then
          M.config.on_attach(c, b)
        end
      end,
    })
  end
  if client_id then
    vim.lsp.buf_attach_client(bufnr, client_id)
  end
  return client_id
end

-- The nn.Module class around the cursor: the nearest `class X` line at or above it.
function M.class_at_cursor()
  local row = vim.api.nvim_win_get_cursor(0)[1]
  local lines = vim.api.nvim_buf_get_lines(0, 0, row, false)
  for i = #lines, 1, -1 do
    local name = lines[i]:match('^%s*class%s+([%w_]+)')
    if name then
      return name
    end
  end
  return nil
end

-- Run kevin.<name> on (buffer uri, class at cursor); `done(err, result)` gets the reply.
function M.execute(name, done)
  local c = client()
  if not c then
    notify('kevin: the language server is not running', vim.log.levels.ERROR)
    return
  end
  local class_name = M.class_at_cursor()
  if not class_name then
    notify('kevin: put the cursor inside an nn.Module class', vim.log.levels.WARN)
    return
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local params = { command = 'kevin.' .. name, arguments = { vim.uri_from_bufnr(bufnr), class_name } }
  c.request('workspace/executeCommand', params, function(err, result)
    if err then
      notify('kevin: ' .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    end
    if done then
      done(err, result)
    end
  end, bufnr)
end

local COMMANDS = {
  KevinOptimize = 'optimize',
  KevinShowDiff = 'showDiff',
  KevinAccept = 'accept',
  KevinDiscard = 'discard',
  KevinCancel = 'cancel',
}

function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', M.config, opts or {})
  for command, name in pairs(COMMANDS) do
    vim.api.nvim_create_user_command(command, function()
      M.execute(name)
    end, { desc = 'kevin.' .. name .. ' for the class at the cursor' })
  end
  local group = vim.api.nvim_create_augroup('kevin', { clear = true })
  vim.api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = M.config.filetypes,
    callback = function(args)
      M.start(args.buf)
    end,
  })
  if M.config.codelens then
    vim.api.nvim_create_autocmd({ 'BufEnter', 'BufWritePost', 'InsertLeave' }, {
      group = group,
      pattern = '*.py',
      callback = refresh_lenses,
    })
  end
end

return M
