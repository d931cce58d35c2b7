-- The plugin's settings as sent to the server: baseUrl (the CLI's --base-url), the old name
-- endpoint read as it with a note, a baseUrl set beating the old name.
vim.opt.runtimepath:prepend(os.getenv('KEVIN_NVIM_DIR'))
vim.opt.shadafile = 'NONE'
local kevin = require('kevin')
local out = {}
local function show(label, settings)
  local sent, note = kevin.server_settings(settings)
  table.insert(out, string.format('%s baseUrl=%s endpoint=%s note=%s', label, tostring(sent.baseUrl),
    tostring(sent.endpoint), tostring(note)))
end
show('NEW', { baseUrl = 'http://new/v1', turns = 2 })
show('OLD', { endpoint = 'http://old/v1' })
show('BOTH', { endpoint = 'http://old/v1', baseUrl = 'http://new/v1' })
show('NONE', nil)
vim.fn.writefile(out, os.getenv('KEVIN_TEST_OUT'))
vim.cmd('qall!')
