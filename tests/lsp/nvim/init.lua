-- Test init: editors/nvim on the runtime path, the server started with this Python, a fake
-- user who answers Kevin's question with the action named by $KEVIN_TEST_ANSWER.
vim.opt.runtimepath:prepend(os.getenv('KEVIN_NVIM_DIR'))
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
require('kevin').setup({
  cmd = { os.getenv('KEVIN_TEST_PYTHON'), '-m', 'kevin_agent', 'lsp' },
  settings = { backend = 'scripted', script = os.getenv('KEVIN_TEST_SCRIPT'), trajectories = 2, turns = 2 },
  handlers = {
    ['window/showMessageRequest'] = function(_, params)
      for _, action in ipairs(params.actions) do
        if action.title == os.getenv('KEVIN_TEST_ANSWER') then
          return action
        end
      end
      return vim.NIL
    end,
  },
})
