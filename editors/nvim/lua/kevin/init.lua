-- kevin-agent for Neovim 0.7+: starts `kevin lsp` for Python buffers and adds :Kevin* commands.
--   require('kevin').setup{ settings = { backend = 'openai', endpoint = 'http://localhost:8000/v1',
--                                        model = 'cognition-ai/Kevin-32B', trajectories = 4, turns = 4 } }
local M = {}

M.config = {
  cmd = { 'kevin', 'lsp' },
  filetypes = { 'python' },
  settings = {},      -- the "kevin" section: backend, endpoint, model, trajectories, turns
  handlers = {},      -- extra LSP handlers (merged over the defaults below)
  on_attach = nil,
  codelens = true,    -- refresh code lenses on enter / after writes
}

local client_id = nil

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
    local handlers = vim.tbl_extend('force', { ['window/showDocument'] = show_document },
      M.config.handlers or {})
    client_id = vim.lsp.start_client({
      name = 'kevin',
      cmd = M.config.cmd,
      root_dir = root_dir(bufnr),
      init_options = { kevin = M.config.settings },
      settings = { kevin = M.config.settings },
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
