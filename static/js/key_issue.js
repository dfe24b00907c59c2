// The key form's account list holds only the chosen owner's accounts: the server sends each
// user's, and the list is rebuilt when the owner changes. Without script the server's list stays
// and a stranger's account is refused on submit.
(() => {
  const owner = document.getElementById("id_owner");
  const account = document.getElementById("id_account");
  const data = document.getElementById("owner-accounts");
  if (!owner || !account || !data) return;
  const accountsOf = JSON.parse(data.textContent);
  const fill = () => {
    const chosen = account.value;
    const names = accountsOf[owner.value] || [];
    for (const option of [...account.options]) {
      if (option.value) option.remove();  // the first, empty option ("the owner's default") stays
    }
    for (const name of names) account.add(new Option(name, name, false, name === chosen));
  };
  owner.addEventListener("change", fill);
  fill();
})();
