-- Drives the flow like a user: open model.py, wait for the lens, :KevinOptimize inside Model,
-- wait for the commit. Writes what it saw to $KEVIN_TEST_OUT; exits non-zero on a timeout.
local out = {}
local function finish(code)
  vim.fn.writefile(out, os.getenv('KEVIN_TEST_OUT'))
  vim.cmd(code == 0 and 'qall!' or 'cquit! ' .. code)
end
local function wait(ms, predicate, what)
  if not vim.wait(ms, predicate, 50) then
    table.insert(out, 'TIMEOUT ' .. what)
    finish(3)
  end
end

vim.cmd('edit ' .. vim.fn.fnameescape(os.getenv('KEVIN_TEST_FILE')))
local bufnr = vim.api.nvim_get_current_buf()
wait(600000, function() return #vim.lsp.buf_get_clients(bufnr) > 0 end, 'client attach')
wait(600000, function()
  require('kevin').refresh_lenses()
  vim.wait(200)
  return #vim.lsp.codelens.get(bufnr) > 0
end, 'code lenses')
for _, lens in ipairs(vim.lsp.codelens.get(bufnr)) do
  table.insert(out, string.format('LENS %d %s', lens.range.start.line, lens.command.title))
end

-- an unsaved edit: the run must use it
vim.fn.search('return a + b')
vim.cmd('normal! ccreturn b + a')
vim.fn.search('def forward', 'b')
local reply = nil
require('kevin').execute('optimize', function(err, result) reply = err or result end)
wait(600000, function() return reply ~= nil end, 'optimize reply')
table.insert(out, 'OPTIMIZE ' .. vim.inspect(reply):gsub('\n', ' '))

local repo = vim.fn.fnamemodify(os.getenv('KEVIN_TEST_FILE'), ':h')
wait(600000, function()
  return vim.fn.system({ 'git', '-C', repo, 'rev-list', '--count', 'HEAD' }):match('^2') ~= nil
end, 'the commit')
table.insert(out, 'COMMIT ' .. vim.fn.system({ 'git', '-C', repo, 'log', '-1', '--format=%s' }):gsub('\n', ''))
finish(0)
