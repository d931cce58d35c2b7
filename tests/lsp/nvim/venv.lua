-- The default cmd `kevin lsp` with no `kevin` on PATH: the plugin finds the project's
-- .venv/bin/kevin, the server starts and attaches; without one, server_cmd says what to do.
vim.opt.runtimepath:prepend(os.getenv('KEVIN_NVIM_DIR'))
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
local out = {}
local function finish(code)
  vim.fn.writefile(out, os.getenv('KEVIN_TEST_OUT'))
  vim.cmd(code == 0 and 'qall!' or 'cquit! ' .. code)
end
local kevin = require('kevin')
kevin.setup({})
vim.cmd('filetype on')  -- an -u script runs before Neovim turns filetype detection on
table.insert(out, 'ON_PATH ' .. vim.fn.executable('kevin'))
local cmd, problem = kevin.server_cmd('/no/such/project')
table.insert(out, 'NO_VENV ' .. tostring(cmd) .. ' ' .. tostring(problem))
vim.cmd('edit ' .. vim.fn.fnameescape(os.getenv('KEVIN_TEST_FILE')))
local bufnr = vim.api.nvim_get_current_buf()
if not vim.wait(600000, function() return #vim.lsp.buf_get_clients(bufnr) > 0 end, 50) then
  table.insert(out, 'TIMEOUT attach')
  finish(3)
end
local client = vim.lsp.buf_get_clients(bufnr)[next(vim.lsp.buf_get_clients(bufnr))]
table.insert(out, 'CMD ' .. table.concat(client.config.cmd, ' '))
if not vim.wait(600000, function() return client.initialized end, 50) then
  table.insert(out, 'TIMEOUT initialize')
  finish(3)
end
table.insert(out, 'INITIALIZED ' .. tostring(client.server_capabilities.codeLensProvider ~= nil))
finish(0)
