"""Hand-written lists that the local sources lack: everyday topics, task forms, languages, shell jobs.

None of these strings is taken from bench/prompts.jsonl (the benchmark); prompts.py also drops any
prompt that contains a benchmark prompt's text.
"""

LANGS = ["Python"] * 6 + ["C++"] * 2 + ["JavaScript"] * 2 + ["TypeScript", "Rust", "Go", "Java", "C", "C#", "Kotlin",
                                                              "Swift", "Ruby", "PHP", "Haskell", "Lua", "Scala", "Julia",
                                                              "Bash", "Perl", "Dart", "Zig", "R", "Elixir", "OCaml"]
TRANSLATE_TO = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]

GENERIC_TASKS = [
    "rotates an array left by k positions", "finds the second largest element of a list", "converts an integer to binary",
    "checks whether two strings are anagrams", "removes all vowels from a string", "counts set bits in an integer",
    "computes the power set of a list", "finds the majority element", "implements a min-heap", "implements a queue with two stacks",
    "finds cycles in a directed graph", "performs a topological sort", "implements union-find", "computes prime numbers with a sieve",
    "evaluates an expression in reverse Polish notation", "converts snake_case to camelCase", "chunks a list into pieces of size n",
    "computes the edit distance of two words", "implements run-length encoding", "finds the longest increasing subsequence",
    "solves the 0/1 knapsack problem", "implements a token bucket rate limiter", "parses an ISO 8601 date",
    "validates an IPv4 address", "computes the checksum of a file", "implements a bloom filter", "finds duplicate files by content",
    "implements a simple state machine for a traffic light", "renders a text progress bar", "pretty-prints a JSON document",
    "implements an event emitter", "computes the dot product of two vectors", "interleaves two lists",
    "computes the intersection of two sorted arrays", "implements a circular linked list", "finds the kth smallest element",
    "generates all balanced parenthesis strings of length 2n", "solves the n-queens problem", "implements a sudoku validator",
    "converts between Roman numerals and integers", "implements a skip list", "implements a priority queue",
    "implements a simple regular expression matcher with . and *", "computes a running median", "implements a hash map with chaining",
    "builds a histogram of word lengths", "counts islands in a grid", "finds the shortest path in a maze", "implements a URL shortener",
    "implements a thread pool", "implements a producer-consumer queue", "reads environment variables with defaults",
    "implements a retry helper with jitter", "computes the Jaccard similarity of two sets", "implements matrix transpose in place",
    "rotates an image stored as a 2D array", "generates a random password", "implements a simple template engine",
    "splits a string on a delimiter while respecting quotes", "implements a tiny key-value store backed by a file",
    "implements a binary search tree with insert and delete", "checks if a binary tree is balanced", "merges overlapping intervals",
    "implements an interval tree", "computes the area of a polygon", "converts a number to words", "implements a simple calculator REPL",
    "finds the longest palindromic substring", "implements Kruskal's algorithm", "implements Prim's algorithm",
    "implements the Floyd-Warshall algorithm", "implements A* search on a grid", "encodes and decodes base64 by hand",
    "implements a simple LZ77 compressor", "implements Huffman coding", "parses a simple INI file", "implements a logger with levels",
    "implements an observer pattern", "implements a dependency injection container", "implements a simple ECS game loop",
    "implements Conway's Game of Life", "simulates a bank account with deposits and withdrawals", "implements a to-do list class",
    "implements a shopping cart with discounts", "implements a library checkout system", "implements a vending machine",
    "implements pagination for a list of items", "sorts a list of records by several keys", "implements merge sort",
    "implements heap sort", "implements counting sort", "implements radix sort", "implements insertion sort",
    "implements a bit set", "implements a sparse matrix", "computes the determinant of a matrix", "solves a linear system by Gaussian elimination",
    "computes the convex hull of points", "implements a simple neural network layer", "computes softmax stably",
    "implements k-means clustering", "implements a linear regression fit", "computes the standard deviation of a list",
    "tokenizes a sentence into words", "counts the frequency of characters", "implements a caesar cipher", "implements a vigenere cipher",
    "implements a simple HTTP server", "downloads a web page and counts links", "watches a directory for changes",
    "implements a command-line argument parser", "reads a CSV file and prints column averages", "writes a list of dicts to CSV",
    "implements an async task queue", "implements a timeout wrapper", "schedules a job every n seconds",
]
SHELL_TASKS = [
    "find the 10 largest files under a directory", "replace a word in every .md file recursively", "count unique IP addresses in an access log",
    "show which process listens on a port", "archive and compress a folder with today's date in the name", "delete files older than 30 days",
    "print the 5 most common words in a text file", "rename all .jpeg files to .jpg", "monitor a log file and alert on ERROR lines",
    "back up a database every night", "list all users with a login shell", "check disk usage per directory, sorted",
    "download a list of URLs in parallel", "convert all PNG images to WebP", "sum the second column of a CSV",
    "find duplicate lines across two files", "extract all email addresses from a file", "run a command until it succeeds",
    "show the git authors with the most commits", "split a large file into 100 MB parts", "measure how long a command takes, 10 times",
]
GENERAL_TOPICS = [
    "the ocean tides", "volcanoes", "honey bees", "the northern lights", "rainforests", "deserts", "coral reefs", "glaciers",
    "migratory birds", "octopuses", "wolves", "mushrooms", "composting", "houseplants", "urban gardening", "bonsai trees",
    "sourdough bread", "fermented foods", "spices of India", "Japanese tea ceremonies", "street food", "coffee roasting",
    "chocolate making", "vegetarian cooking", "meal planning", "olive oil", "cheese making", "baking cookies", "grilling",
    "train travel in Europe", "backpacking", "camping in the rain", "road trips", "learning to surf", "rock climbing",
    "marathon training", "yoga", "cycling to work", "swimming", "chess openings", "board games", "crossword puzzles",
    "photography", "watercolor painting", "pottery", "knitting", "woodworking", "playing the guitar", "learning the piano",
    "jazz improvisation", "classical music", "film noir", "science fiction novels", "poetry", "writing a diary", "libraries",
    "museums", "ancient Egypt", "the Vikings", "the Ming dynasty", "the Byzantine Empire", "the Apollo program", "the Great Wall",
    "medieval castles", "the Age of Exploration", "the invention of paper", "the history of money", "the telegraph",
    "the bicycle", "the steam engine", "lighthouses", "bridges", "skyscrapers", "roman roads", "canals", "windmills",
    "electric guitars", "solar panels", "wind turbines", "nuclear fusion", "batteries", "3D printing", "robots", "drones",
    "self-driving cars", "space stations", "Mars rovers", "telescopes", "comets", "the moon", "eclipses", "exoplanets",
    "DNA", "the brain", "sleep", "dreams", "memory", "habits", "procrastination", "stress", "friendship", "kindness",
    "moving to a new city", "starting a new job", "working from a cafe", "public speaking", "job interviews", "negotiating a salary",
    "saving money", "budgeting", "investing for beginners", "renting versus buying a home", "minimalism", "decluttering",
    "raising a puppy", "adopting a cat", "keeping chickens", "beekeeping", "fishing", "birdwatching", "stargazing",
    "learning a second language", "teaching children to read", "homeschooling", "online courses", "studying for exams",
    "volunteering", "community gardens", "recycling", "plastic pollution", "clean water", "climate change", "electric buses",
    "city parks", "traffic jams", "remote villages", "island life", "mountain huts", "winter holidays", "summer festivals",
    "birthday traditions", "weddings", "family reunions", "grandparents", "sibling rivalry", "teenagers and phones",
    "video games", "social media", "online privacy", "passwords", "email etiquette", "time zones", "calendars",
    "the Olympic Games", "football", "basketball", "tennis", "cricket", "sailing", "skiing", "ice skating", "martial arts",
    "origami", "magic tricks", "stand-up comedy", "theater", "opera", "ballet", "street art", "architecture", "fashion",
    "sewing", "thrift shopping", "repairing things", "bicycle maintenance", "car maintenance", "home insulation", "tiny houses",
    "earthquakes", "hurricanes", "thunderstorms", "snowflakes", "rainbows", "clouds", "the seasons", "autumn leaves",
    "spring flowers", "the desert at night", "a quiet morning", "an old train station", "a busy market", "a small bakery",
    "a mountain lake", "a foggy harbor", "a library at midnight", "a robot gardener", "a time traveler", "a lost key",
    "an abandoned amusement park", "a talking parrot", "a village without clocks", "a dragon who cannot fly",
]
CHAT_FORMS = [
    "Explain {t} in simple terms.", "Give me a short overview of {t}.", "What are the most common misconceptions about {t}?",
    "Write a short paragraph about {t}.", "List five interesting facts about {t}.", "Why is {t} important? Keep it brief.",
    "Write a poem about {t}.", "Write a limerick about {t}.", "Write a haiku about {t}.", "Tell me a short story involving {t}.",
    "What should a beginner know about {t}?", "How would you explain {t} to a child?", "What is the history of {t}?",
    "Give me three tips related to {t}.", "What are the pros and cons of {t}?", "Write a tweet about {t}.",
    "Write a short dialogue between two friends talking about {t}.", "Describe {t} using all five senses.",
    "What are some good books or resources to learn about {t}?", "Plan a weekend around {t}.",
    "Write a product description for something related to {t}.", "What do experts disagree about regarding {t}?",
    "Create a short quiz with answers about {t}.", "Write an encouraging note to someone who is nervous about {t}.",
    "What would the world look like without {t}?", "Give me a fun fact about {t} and explain why it is true.",
    "Summarize what people usually get wrong about {t}, as a numbered list.", "Write the opening line of a novel about {t}.",
    "If you had to give a five-minute talk on {t}, what would you say?", "Describe {t} as if you were a tour guide.",
    "What questions would you ask an expert on {t}?", "Write a short motivational speech that uses {t} as a metaphor.",
    "Write a friendly email to a friend recommending {t}.", "What is one thing about {t} that surprised you?",
    "Make a checklist for someone getting started with {t}.", "Compare {t} today with how it was fifty years ago.",
]
COMPARE_FORMS = ["Compare {a} and {b}.", "What do {a} and {b} have in common?", "Which is more interesting, {a} or {b}? Argue both sides.",
                 "Write a short essay connecting {a} and {b}.", "Explain the difference between {a} and {b}."]
PEOPLE = ["a nurse", "a student", "a retired teacher", "a new manager", "a freelance designer", "a parent of twins",
          "a software developer", "a small shop owner", "a farmer", "a musician", "a night-shift worker", "an exchange student",
          "a first-time home buyer", "a volunteer firefighter", "a junior accountant", "a chef", "a truck driver", "a librarian"]
SITUATIONS = ["keep procrastinating", "feel tired every afternoon", "have too many meetings", "want to learn to cook",
              "am moving abroad next month", "have trouble saying no to people", "want to get fit without a gym",
              "have a difficult coworker", "want to save for a trip", "can't sleep before big days", "want to start a side project",
              "need to give a toast at a wedding", "forget names all the time", "want to read more books",
              "have a messy apartment", "am planning a surprise party", "want to make new friends in a new town",
              "have to learn a new skill quickly for work", "feel overwhelmed by email", "want to spend less time on my phone"]
ADVICE_FORMS = ["I am {p} and I {s}. What should I do?", "As {p}, I {s}. Any advice?", "What practical steps can help when you {s}?",
                "My friend is {p} and says they {s}. How can I help them?", "Give me a plan for the next week: I {s}."]
CODE_FORMS = [
    "Write a {lang} function that {task}.", "Implement code in {lang} that {task}, with a short usage example.",
    "Show me a {lang} program that {task}. Add comments.", "How would I write something in {lang} that {task}?",
    "Write tests in {lang} for a function that {task}.", "Explain how an algorithm that {task} works, then write it in {lang}.",
    "Give an idiomatic {lang} solution that {task}, and state its time complexity.",
    "I need {lang} code that {task}. Keep it short.", "Write a {lang} class that {task}.",
    "Write pseudocode for a routine that {task}, then translate it to {lang}.",
]
SNIPPET_FORMS = [
    "Explain what this Python code does:\n\n{code}", "Write pytest tests for this function:\n\n{code}",
    "What is the time complexity of this code? Explain.\n\n{code}", "Port this Python code to {lang}:\n\n{code}",
    "Review this code and suggest improvements:\n\n{code}", "Write a docstring for this code:\n\n{code}",
    "Walk me through this function line by line:\n\n{code}", "How could this code fail? List the edge cases.\n\n{code}",
    "Rewrite this in {lang}, keeping the same behaviour:\n\n{code}", "Give an example call of this code and its result:\n\n{code}",
]
DOC_FORMS = [
    "Write a {lang} function `{name}` that does the following: {doc}", "In {lang}, implement {name}({args}). Spec: {doc}",
    "Here is a one-line spec: \"{doc}\" Write a {lang} implementation with a usage example.",
    "How would you implement a helper called {name} in {lang}? It should do this: {doc}",
    "Write a {lang} version of Python's {module}.{name}. Its documentation says: {doc}",
]
CLASS_FORMS = ["Implement a {lang} class named {name}. Its purpose: {doc}", "Design a class {name} in {lang}: {doc} Show how to use it."]
PKG_CODE_FORMS = [
    "Write a small {lang} command-line tool in the spirit of {name} ({syn}). Keep it short.",
    "Sketch the design of a {syn_lc}, then write its core data structures in {lang}.",
    "What would a minimal {lang} implementation of a {syn_lc} look like? Write it.",
    "Write a configuration file and a short {lang} script for working with {name} ({syn}).",
]
PKG_CHAT_FORMS = ["What is {name} ({syn}) used for?", "Explain to a beginner what a {syn_lc} is and why someone would need one.",
                  "When would I pick {name} over its alternatives? It is described as: {syn}.",
                  "Write a short README introduction for a project described as: {syn}."]
PY_CHAT_FORMS = ["What is Python's {module} module for? Give an example.", "When should I use {module}.{name} in Python?",
                 "Explain {module}.{name} to someone new to Python. Its documentation says: {doc}"]
CODE_EDITS = [
    "Add type hints to this Python code and return the full code:\n\n{code}",
    "Add comments explaining each step of this code:\n\n{code}",
    "Add a docstring to this function and return it unchanged otherwise:\n\n{code}",
    "Refactor this code to be shorter and clearer, keeping its behaviour:\n\n{code}",
    "Convert this Python code to {lang} and return only the code:\n\n{code}",
    "Extract a helper function from this code and return the result:\n\n{code}",
    "Rewrite this code so that it logs what it is doing with the logging module:\n\n{code}",
    "Remove the docstring and the comments from this code:\n\n{code}",
    "Reformat this code to follow PEP 8, without changing it otherwise:\n\n{code}",
    "Add input validation to this function, raising ValueError on bad input:\n\n{code}",
]
PROSE_EDITS = [
    "Summarize the following in one sentence:\n\n{text}", "Rewrite the following to be more concise:\n\n{text}",
    "Translate the following into {human}:\n\n{text}", "Turn the following into a bulleted list of key points:\n\n{text}",
    "Rewrite the following in a friendly, informal tone:\n\n{text}", "Rewrite the following for a ten-year-old:\n\n{text}",
    "Give the following a title and a one-line subtitle:\n\n{text}", "Extract the five most important keywords from this text:\n\n{text}",
    "Shorten the following to about half its length:\n\n{text}", "Rewrite the following as a short email to a colleague:\n\n{text}",
    "Write three questions that the following text answers:\n\n{text}", "Rewrite the following in the passive voice where possible:\n\n{text}",
]
FIX_TEXT = ["Fix the spelling and grammar in this text:\n\n{text}", "Proofread the following and return the corrected text:\n\n{text}",
            "Correct the mistakes in this paragraph:\n\n{text}"]
FIX_CODE = ["Fix the bug in this Python function and return the corrected function:\n\n{code}",
            "This code has a bug. Find it, explain it and fix it:\n\n{code}",
            "Something is wrong with this function. What is it?\n\n{code}"]
