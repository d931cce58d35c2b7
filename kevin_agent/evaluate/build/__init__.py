"""The fast build: content-addressed cache (``cache``), the split layout (``split``, ``chunks``,
``launch``, ``layout``), flags (``flags``), ninja (``ninja_file``), finding a candidate's
extensions (``specs``) and compiling whole candidates (``compile``)."""
