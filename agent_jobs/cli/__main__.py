from agent_jobs.cli import main

raise SystemExit(main())
